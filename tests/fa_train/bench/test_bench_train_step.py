"""Training-step benchmark on CPU (flash under the Triton interpreter) with a tiny stand-in for
the GPT-2 small preset."""
import json

import pytest

import torch

from fa_train.bench import train_step
from fa_train.bench.cli import main
from fa_train.bench.train_step import TrainStepBenchConfig, run_train_step_bench
from fa_train.models import gpt


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(gpt.GPT2_PRESETS, "gpt2-small", dict(n_layer=1, n_head=2, d_model=32))


def test_train_step_rows_and_reports(tiny_preset, tmp_path):
    assert main(["train-step", "--out", str(tmp_path), "--device", "cpu", "--batch", "2",
                 "--seqlen", "16", "--vocab-size", "50", "--steps", "3", "--warmup-steps", "1",
                 "--impls", "standard,sdpa,flash", "--compile", "0", "--dtype", "fp32",
                 "--no-progress"]) == 0
    rows = json.loads((tmp_path / "train_step.json").read_text())["rows"]
    assert [(r["impl"], r["runner"], r["status"]) for r in rows] == [
        ("standard", "bare", "ok"), ("sdpa", "bare", "ok"), ("flash", "bare", "ok")]
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(2 * 16 / (r["step_ms"] / 1e3))
        assert r["loss_last"] < r["loss_first"]  # the optimizer steps on a fixed batch
        assert r["compile_mode"] is None  # eager
    # same seed, same weights, attention swapped: same losses
    for r in rows[1:]:
        assert r["loss_last"] == pytest.approx(rows[0]["loss_last"], rel=1e-4)
    assert "| gpt2-small | 0 | bare |" in (tmp_path / "train_step.md").read_text()


def test_trainer_runner_trains_the_same_model_through_lightning(tiny_preset):
    config = dict(device="cpu", impls=["sdpa"], compile=[0], batch=2, seqlen=16, vocab_size=50,
                  steps=4, warmup_steps=2, dtype="fp32", progress=False)
    both = TrainStepBenchConfig(runners=["bare", "trainer"], **config)
    bare, trainer = run_train_step_bench(both)
    assert (bare["runner"], trainer["runner"], trainer["status"]) == ("bare", "trainer", "ok")
    assert trainer["tokens_per_s"] > 0
    # same seed, weights, batch and optimizer: the same first loss and a falling curve
    assert trainer["loss_first"] == pytest.approx(bare["loss_first"], rel=1e-5)
    assert trainer["loss_last"] < trainer["loss_first"]


def test_norms_swap_the_layer_norm_kernels_and_keep_the_losses(tiny_preset, tmp_path):
    assert main(["train-step", "--out", str(tmp_path), "--device", "cpu", "--batch", "2",
                 "--seqlen", "16", "--vocab-size", "50", "--steps", "2", "--warmup-steps", "1",
                 "--impls", "sdpa", "--compile", "0", "--dtype", "fp32", "--norms", "torch,fused",
                 "--no-progress"]) == 0
    torch_row, fused_row = json.loads((tmp_path / "train_step.json").read_text())["rows"]
    assert (torch_row["norm"], fused_row["norm"]) == ("torch", "fused")
    assert fused_row["status"] == "ok"
    assert fused_row["loss_last"] == pytest.approx(torch_row["loss_last"], rel=1e-4)
    assert "| gpt2-small | 0 | bare | auto | fused |" in (tmp_path / "train_step.md").read_text()


def test_train_step_oom_is_a_row(tiny_preset, monkeypatch):
    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
    monkeypatch.setattr(train_step, "_build", out_of_memory)
    rows = run_train_step_bench(TrainStepBenchConfig(
        device="cpu", impls=["sdpa"], compile=[0], batch=1, seqlen=8, vocab_size=20, steps=1,
        warmup_steps=1, dtype="fp32", progress=False))
    assert rows[0]["status"] == "OOM" and "2 GiB" in rows[0]["reason"]


@pytest.mark.parametrize("field,value,match", [
    ("models", ["gpt5"], "models"), ("impls", ["magic"], "impls"), ("compile", [2], "compile"),
    ("steps", 0, "steps"), ("dtype", "fp16", "loss scaling"), ("runners", ["hf"], "runners"),
    ("norms", ["apex"], "norms"), ("compile_mode", "fastest", "compile_mode")])
def test_train_step_config_errors_name_the_argument(field, value, match):
    with pytest.raises(ValueError, match=match):
        TrainStepBenchConfig(device="cpu", **{field: value}).validate()
