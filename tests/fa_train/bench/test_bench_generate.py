"""Generation benchmark on CPU with a tiny stand-in for the GPT-2 small preset."""
import json

import pytest

from fa_train.bench.cli import main
from fa_train.models import gpt
from tests.fa_train.inference.helpers import write_tiny_run


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(gpt.GPT2_PRESETS, "gpt2-small", dict(n_layer=1, n_head=2, d_model=32))


def test_generate_rows_and_reports(tiny_preset, tmp_path):
    assert main(["generate", "--out", str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                 "--impls", "sdpa,standard", "--prompt-len", "5", "--new-tokens", "6",
                 "--repeats", "1", "--no-hf"]) == 0
    rows = json.loads((tmp_path / "generate.json").read_text())["rows"]
    assert [(r["impl"], r["status"]) for r in rows] == [("sdpa", "ok"), ("standard", "ok")]
    for r in rows:
        assert r["end_to_end_tokens_per_s"] == pytest.approx(
            6 / (r["prefill_ms"] / 1e3 + r["decode_ms_per_token"] * 6 / 1e3))
        assert r["agree_with_hf"] is None
    report = (tmp_path / "generate.md").read_text()
    assert "| 5 | 6 |" in report
    assert "transformers' greedy output" not in report and "Speculative" not in report


def test_generate_bench_refuses_bad_values(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path), "--device", "cpu", "--impls", "magic"])
    assert "impls" in capsys.readouterr().err


def test_speculative_rows_equal_greedy_and_count_acceptance(tmp_path):
    target, _, tok = write_tiny_run(tmp_path / "target")
    draft, _, _ = write_tiny_run(tmp_path / "draft", seed=1)   # other weights, same vocabulary
    common = ["generate", "--device", "cpu", "--dtype", "fp32", "--impls", "sdpa",
              "--new-tokens", "8", "--repeats", "1", "--no-hf", "--checkpoint", str(target),
              "--prompt-text", "return the", "--spec-trees", "1,1;2,1"]
    for name, source in (("self", target), ("other", draft)):
        assert main(common + ["--out", str(tmp_path / name), "--draft", str(source)]) == 0
        rows = json.loads((tmp_path / name / "generate.json").read_text())["rows"]
        assert [r["impl"] for r in rows] == ["sdpa", "sdpa-spec 1,1", "sdpa-spec 2,1"]
        assert {r["prompt_len"] for r in rows} == {len(tok.encode("return the").ids)}
        for r in rows[1:]:
            assert r["equal_to_greedy"] is True
            assert r["target_passes"] >= 8 / (1 + len(r["impl"].split()[1].split(",")))
        rates = [r["acceptance_rate"] for r in rows[1:]]
        assert rates == [1.0, 1.0] if name == "self" else all(0 <= x < 1 for x in rates)
    report = (tmp_path / "other" / "generate.md").read_text()
    assert "acceptance rate" in report and "equal to the eager greedy output: yes" in report


def test_speculative_options_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path), "--device", "cpu", "--draft", "x"])
    assert "checkpoint is required with prompt_text or draft" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path), "--device", "cpu", "--checkpoint", "x",
              "--spec-trees", "2,0"])
    assert "spec_trees must be comma lists of integers >= 1" in capsys.readouterr().err
    missing = tmp_path / "no-run"
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path), "--device", "cpu", "--checkpoint", str(missing)])
    assert f"checkpoint {missing}: not found" in capsys.readouterr().err
