"""fa-bench decode on CPU (the kernel under the interpreter): rows, guard, reports, command line,
the ncu worker's decode mode and measured-byte plumbing (a stub for ncu); one GPU + ncu test."""
import csv
import json
import shutil

import pytest
import torch

from fa_train.bench import decode, io_worker
from fa_train.bench.cli import build_parser, configure, main
from fa_train.bench.ncu import NcuError
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


@pytest.mark.parametrize("heads", ["4:2", "4:4"])
def test_sdpa_backends_without_gqa_get_grouped_queries(monkeypatch, heads):
    """cudnn and efficient (CUDA only; math stands in for them here) see each K/V head's query
    heads as its query rows, without enable_gqa; math (like flash) gets enable_gqa."""
    monkeypatch.setitem(decode.SDPA_BACKENDS, "sdpa_cudnn", "MATH")
    monkeypatch.setitem(decode.SDPA_BACKENDS, "sdpa_efficient", "MATH")
    calls, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((tuple(q.shape), kwargs.get("enable_gqa", False)))
        return sdpa(q, k, v, **kwargs)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    impls = ["sdpa_cudnn", "sdpa_efficient", "sdpa_math"]
    rows = run_decode_bench(dict(TINY, impls=impls, batches=[2], heads=[heads]))
    assert [r["impl"] for r in rows] == impls
    assert all(r["status"] == "ok" and r["check_passed"] for r in rows), rows
    heads, heads_kv = parse_heads(heads)
    assert set(calls) == {((2, heads_kv, heads // heads_kv, 16), False),
                          ((2, heads, 1, 16), heads != heads_kv)}


def test_sdpa_backends_missing_on_the_cpu_are_unsupported_rows():
    rows = run_decode_bench(dict(TINY, impls=["sdpa_cudnn", "sdpa_efficient"], batches=[1]))
    assert all(r["status"] == "unsupported" and "No viable backend" in r["reason"]
               for r in rows), rows


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


def _worker_args(*extra):
    return io_worker.build_parser().parse_args(["decode", *extra])


def test_worker_parses_decode_and_refuses_other_impls(capsys):
    args = _worker_args("--impl", "sdpa_math", "--cache-len", "48", "--heads", "6",
                        "--heads-kv", "3", "--head-dim", "8", "--dtype", "fp32")
    assert (args.mode, args.impl, args.batch, args.cache_len, args.heads, args.heads_kv,
            args.head_dim, args.dtype) == ("decode", "sdpa_math", 1, 48, 6, 3, 8, "fp32")
    with pytest.raises(SystemExit):
        _worker_args("--impl", "flash")  # an attention impl, not a decode one
    assert "invalid choice: 'flash'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        io_worker.build_parser().parse_args(["--impl", "flash_decode"])  # no mode


@pytest.mark.parametrize("impl", ["materialized", "sdpa_math"])
def test_worker_builds_the_decode_step_on_cpu(impl):
    from kernels import reference_attention_with_kvcache
    args = _worker_args("--impl", impl, "--batch", "2", "--cache-len", "37", "--heads", "6",
                        "--heads-kv", "2", "--head-dim", "8", "--dtype", "fp32", "--seed", "3")
    out = io_worker.build_call(args, torch.device("cpu"))()
    q, k_cache, v_cache, _, _ = decode.decode_inputs(2, 37, 6, 2, 8, torch.float32, "cpu", 3)
    ref = reference_attention_with_kvcache(q.double(), k_cache.double(), v_cache.double())
    assert out.shape == (2, 1, 6, 8) and torch.allclose(out.double(), ref, atol=1e-3), impl


def _bytes_stub(calls, over):
    """A profiler standing in for ncu: reads `over[impl]` x the K and V bytes the worker's
    arguments describe, and records the arguments."""
    def profile(args, ncu):
        calls.append(args)
        a = io_worker.build_parser().parse_args(args)
        ideal = decode.kv_bytes(a.batch, a.cache_len, a.heads_kv, a.head_dim, 4)
        return {"kernels": 2, "dram__bytes_read.sum": over[a.impl] * ideal,
                "dram__bytes_write.sum": 1000.0}
    return profile


def test_dram_bytes_passes_the_cell_to_the_worker():
    cfg = DecodeBenchConfig(**dict(TINY, ncu="my-ncu", seed=5))
    shape = {"batch": 3, "cache_len": 40, "heads": 4, "heads_kv": 2, "head_dim": 16}
    calls = []
    res = decode.dram_bytes("flash_decode", shape, cfg, _bytes_stub(calls, {"flash_decode": 1.1}))
    a = io_worker.build_parser().parse_args(calls[0])
    assert (a.mode, a.impl, a.batch, a.cache_len, a.heads, a.heads_kv, a.head_dim, a.dtype,
            a.seed) == ("decode", "flash_decode", 3, 40, 4, 2, 16, "fp32", 5)
    assert res["dram_read_bytes"] == pytest.approx(1.1 * 2 * 3 * 40 * 2 * 16 * 4)
    assert res["read_over_ideal"] == pytest.approx(1.1)
    assert (res["dram_write_bytes"], res["ncu_kernels"], res["ncu_note"]) == (1000.0, 2, None)

    def broken(args, ncu):
        raise NcuError(f"{ncu} exited with 1: boom")
    res = decode.dram_bytes("flash_decode", shape, cfg, broken)
    assert res["read_over_ideal"] is None and res["ncu_note"] == "my-ncu exited with 1: boom"
    res = decode.dram_bytes("flash_decode", shape, cfg, lambda args, ncu: {"kernels": 1})
    assert res["read_over_ideal"] is None
    assert res["ncu_note"] == "ncu reported no dram__bytes_read.sum"


def test_measured_bytes_reach_rows_tables_and_csv(tmp_path, monkeypatch):
    cfg = DecodeBenchConfig(**dict(TINY, batches=[2])).validate()
    cfg.ncu = "ncu"
    # A CPU run stands in for a CUDA one: validation (which refuses ncu on a CPU) is skipped.
    monkeypatch.setattr(DecodeBenchConfig, "validate", lambda self: self)
    monkeypatch.setattr(decode, "materialized_decode", lambda q, k, v: torch.zeros_like(q))
    calls = []
    rows = run_decode_bench(cfg, profiler=_bytes_stub(calls, {"flash_decode": 1.0,
                                                               "sdpa_math": 4.0}))
    assert [a[2] for a in calls] == ["flash_decode", "sdpa_math"]  # not the incorrect one
    by_impl = {r["impl"]: r for r in rows}
    assert by_impl["flash_decode"]["read_over_ideal"] == pytest.approx(1.0)
    assert by_impl["sdpa_math"]["read_over_ideal"] == pytest.approx(4.0)
    assert by_impl["materialized"]["read_over_ideal"] is None
    assert by_impl["materialized"]["ncu_note"] == "not profiled: incorrect"
    paths = decode.write_decode_reports(rows, tmp_path, cfg)
    md = paths["md"].read_text()
    assert "| 16 | 4 | 2 | 2 | 40 | 1.00 | incorrect | 4.00 |" in md
    assert "- not measured (1 rows): not profiled: incorrect" in md
    with open(paths["csv"]) as f:
        table = {r["impl"]: r for r in csv.DictReader(f)}
    assert float(table["sdpa_math"]["read_over_ideal"]) == pytest.approx(4.0)
    assert float(table["sdpa_math"]["dram_read_bytes"]) == pytest.approx(4.0 * 2 * 2 * 40 * 2
                                                                         * 16 * 4)
    assert table["materialized"]["dram_read_bytes"] == ""
    assert "DRAM bytes read / K and V bytes" in decode.summary_table(rows)


def test_ncu_option_grid_and_executable(monkeypatch):
    monkeypatch.setattr(DecodeBenchConfig, "validate", lambda self: self)
    base = ["decode", "--out", "unused", "--device", "cpu"]
    config, _, _ = configure(build_parser().parse_args(base + ["--ncu"]))
    assert config.ncu == "ncu" and config.batches == [1] and config.head_dims == [128]
    assert config.cache_lens == [16384, 65536] and config.heads == ["32:32", "32:8"]
    config, _, _ = configure(build_parser().parse_args(
        base + ["--ncu", "/opt/ncu", "--cache-lens", "4096"]))
    assert config.ncu == "/opt/ncu" and config.cache_lens == [4096]
    config, _, _ = configure(build_parser().parse_args(base))
    assert config.ncu is None and config.batches == [1, 2, 4, 8]


def test_ncu_refusals_are_one_line(tmp_path, capsys, monkeypatch):
    argv = ["decode", "--out", str(tmp_path), "--device", "cpu", "--ncu", "ncu-not-installed"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("decode: ncu: ncu unavailable: 'ncu-not-installed' is not on PATH "
                        "(install Nsight Compute)")
    monkeypatch.setattr(decode, "find_ncu", lambda ncu: "/usr/bin/ncu")
    with pytest.raises(SystemExit):
        main(argv)
    assert "decode: ncu: Nsight Compute measures CUDA devices; device is 'cpu'" in (
        capsys.readouterr().err)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute")
def test_gpu_flash_decode_reads_each_kv_head_once_per_group():
    # K and V: 2 x 32768 x 8 x 128 bf16 = 134 MB, beyond the H100's 50 MB L2
    rows = run_decode_bench(dict(impls=["flash_decode"], batches=[1], cache_lens=[32768],
                                 heads=["32:8"], head_dims=[128], dtype="bf16", device="cuda",
                                 warmup_ms=1, rep_ms=5, progress=False, ncu="ncu"))
    row = rows[0]
    assert row["status"] == "ok" and row["ncu_note"] is None, row
    assert 0.9 <= row["read_over_ideal"] <= 1.5, row
