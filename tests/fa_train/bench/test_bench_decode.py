"""fa-bench decode on CPU (the kernel under the interpreter): rows, guard, reports, command line."""
import csv
import json

import pytest
import torch

from fa_train.bench import decode
from fa_train.bench.cli import main
from fa_train.bench import DecodeBenchConfig, run_decode_bench
from fa_train.bench.decode import parse_heads, step_bytes

TINY = dict(impls=["flash_decode", "materialized", "sdpa_math"], batches=[1, 2], cache_lens=[40],
            heads=["4:2"], head_dims=[16], dtype="fp32", device="cpu", warmup_ms=1, rep_ms=1,
            progress=False)


def test_rows_bytes_and_guard():
    rows = run_decode_bench(TINY)
    assert [(r["impl"], r["batch"]) for r in rows] == [
        (impl, b) for b in (1, 2) for impl in TINY["impls"]]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["check_passed"] and r["check_rel_err"] < 1e-4
        assert r["bytes"] == (2 * r["batch"] * 40 * 2 + 2 * r["batch"] * 4) * 16 * 4
        assert r["gb_per_s"] == pytest.approx(r["bytes"] / (r["ms"] * 1e-3) / 1e9)


def test_wrong_output_is_not_timed(monkeypatch):
    monkeypatch.setattr(decode, "materialized_decode", lambda q, k, v: torch.zeros_like(q))
    rows = run_decode_bench(dict(TINY, impls=["materialized"], batches=[1]))
    assert rows[0]["status"] == "incorrect" and rows[0]["ms"] is None
    assert rows[0]["check_rel_err"] == pytest.approx(1.0)


def test_materialized_decode_matches_reference():
    from kernels import reference_attention_with_kvcache
    torch.manual_seed(0)
    q, k_cache, v_cache, k, v = decode.decode_inputs(2, 30, 8, 2, 16, torch.float64, "cpu", 0)
    assert torch.equal(k_cache[:, -1:], k) and torch.equal(v_cache[:, -1:], v)
    out = decode.materialized_decode(q, k_cache, v_cache)
    ref = reference_attention_with_kvcache(q, k_cache, v_cache)
    assert torch.allclose(out, ref)


def test_step_bytes():
    # batch 1, 16K cache, 8 K/V heads of 128, 32 query heads, bf16: 64 MiB of K and V
    assert step_bytes(1, 16384, 32, 8, 128, 2) == 2 * 16384 * 8 * 128 * 2 + 2 * 32 * 128 * 2


@pytest.mark.parametrize("text,error", [("32:5", "HQ:HKV"), ("0:0", "HQ:HKV"), ("a:b", "HQ:HKV"),
                                        ("8:4:2", "HQ:HKV")])
def test_bad_heads(text, error):
    with pytest.raises(ValueError, match=error):
        parse_heads(text)


@pytest.mark.parametrize("field,value,error", [
    ("impls", ["nope"], "impls: 'nope' is not one of"), ("batches", [0], "not a positive"),
    ("head_dims", [512], "above 256"), ("timer", "wall", "timer must be one of"),
    ("cache_lens", [], "cache_lens must not be empty")])
def test_bad_config(field, value, error):
    with pytest.raises(ValueError, match=error):
        DecodeBenchConfig(**dict(TINY, **{field: value})).validate()


def test_command_line_writes_json_csv_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "decode"
    assert main(["decode", "--out", str(out), "--device", "cpu", "--dtype", "fp32",
                 "--impls", "flash_decode,materialized", "--batches", "1", "--cache-lens",
                 "20,70", "--heads", "4:1", "--head-dims", "32", "--warmup-ms", "1",
                 "--rep-ms", "1", "--no-progress"]) == 0
    payload = json.loads((out / "decode.json").read_text())
    assert len(payload["rows"]) == 4 and all(r["status"] == "ok" for r in payload["rows"])
    with open(out / "decode.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["impl"], r["cache_len"]) for r in table] == [
        ("flash_decode", "20"), ("materialized", "20"), ("flash_decode", "70"),
        ("materialized", "70")]
    assert float(table[0]["gb_per_s"]) > 0
    assert "Achieved HBM bandwidth" in (out / "decode.md").read_text()
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("| 32 | 4 | 1 | 1 | 70 |")  # the table comes last


def test_command_line_refuses_bad_heads_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["decode", "--out", str(tmp_path), "--device", "cpu", "--heads", "32:5"])
    assert exit_info.value.code == 2
    assert "decode: heads: '32:5' must be HQ:HKV" in capsys.readouterr().err
