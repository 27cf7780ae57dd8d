"""Generation benchmark on CPU with a tiny stand-in for the GPT-2 small preset."""
import json

import pytest

from fa_train.bench.cli import main
from fa_train.models import gpt


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
    assert "| 5 | 6 |" in (tmp_path / "generate.md").read_text()


def test_generate_bench_refuses_bad_values(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path), "--device", "cpu", "--impls", "magic"])
    assert "impls" in capsys.readouterr().err
