"""PerfMonitor: tokens/s per device, FLOPs per token from fa_train.metrics.flops, MFU rule."""
import lightning as L
import pytest
import torch

from fa_train.callbacks import LossHistory, PerfMonitor
from fa_train.metrics.flops import transformer_flops_per_token
from fa_train.models import GPT
from fa_train.tasks import LanguageModelingTask
from fa_train.data.fake import FakeLMDataModule


def test_perf_monitor_and_loss_history_on_cpu():
    dm = FakeLMDataModule(batch_size=4, seq_len=16, vocab_size=32, n_train=64)
    model = GPT(vocab_size=32, max_seq_len=16, n_layer=1, n_head=2, d_model=32, attention="sdpa")
    task = LanguageModelingTask(model, optimizer={"name": "adamw", "lr": 1e-3})
    perf, hist = PerfMonitor(warmup_steps=2, log_every_n_steps=2), LossHistory()
    trainer = L.Trainer(accelerator="cpu", max_steps=8, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=1, val_check_interval=4, callbacks=[perf, hist])
    trainer.fit(task, datamodule=dm)
    s = perf.summary
    assert s["tokens_per_sec_per_device"] > 0 and s["seq_len"] == 16
    assert s["flops_per_token"] == pytest.approx(transformer_flops_per_token(
        model.num_params(), 1, 2, 16, 16))
    assert "mfu" not in s and s["device_name"] == "cpu"  # no peak FLOP/s known for a CPU
    assert [step for step, _ in hist.train] == list(range(1, 9))
    assert [step for step, _ in hist.val] == [4, 8]


def test_perf_monitor_names_the_device_when_too_few_steps_were_timed():
    """A resumed stretch shorter than the warm-up has no tokens/s, but still its device."""
    dm = FakeLMDataModule(batch_size=4, seq_len=16, vocab_size=32, n_train=16)
    model = GPT(vocab_size=32, max_seq_len=16, n_layer=1, n_head=2, d_model=32, attention="sdpa")
    perf = PerfMonitor(warmup_steps=100)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[perf])
    trainer.fit(LanguageModelingTask(model, optimizer={"name": "adamw", "lr": 1e-3}), datamodule=dm)
    assert trainer.global_step == 4 and perf.summary == {"device_name": "cpu"}


def test_precision_aliases():
    from fa_train.train import resolve_precision
    assert resolve_precision("fp16-mixed") == "16-mixed"
    assert resolve_precision("bf16-mixed") == "bf16-mixed"
    expect = "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    assert resolve_precision("auto") == expect


def test_loss_history_records_the_full_loss_under_gradient_accumulation():
    torch.manual_seed(0)
    dm = FakeLMDataModule(batch_size=4, seq_len=16, vocab_size=32, n_train=64)
    model = GPT(vocab_size=32, max_seq_len=16, n_layer=1, n_head=2, d_model=32, attention="sdpa")
    task = LanguageModelingTask(model, optimizer={"name": "adamw", "lr": 1e-9})
    hist = LossHistory()
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, accumulate_grad_batches=4, callbacks=[hist])
    trainer.fit(task, datamodule=dm)
    # an untrained model over 32 tokens has a loss near ln(32) = 3.47, not 3.47 / 4
    assert all(2.5 < loss < 4.5 for _, loss in hist.train)
