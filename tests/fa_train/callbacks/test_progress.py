"""Training metrics reach the host (a GPU-to-host copy that waits for the step) only when the
progress bar redraws."""
import traceback

import lightning as L
import torch

from fa_train.callbacks import ProgressBar
from fa_train.models import GPT
from fa_train.tasks import LanguageModelingTask
from fa_train.data.fake import FakeLMDataModule


def test_progress_bar_reads_metrics_only_when_it_redraws(monkeypatch):
    redraws, shown, lightning_reads = [], [], []
    original, item = ProgressBar.get_metrics, torch.Tensor.item
    trainer = None

    def spy(self, trainer, pl_module):
        metrics = original(self, trainer, pl_module)
        if trainer.training:
            redraws.append(trainer.global_step)
            shown.append(metrics)
        return metrics

    def counted_item(tensor):  # Lightning turning logged tensors into numbers after a batch
        if (trainer is not None and trainer.training
                and any(f.name == "convert_tensors_to_scalars" for f in traceback.extract_stack())):
            lightning_reads.append(trainer.global_step)
        return item(tensor)

    monkeypatch.setattr(ProgressBar, "get_metrics", spy)
    monkeypatch.setattr(torch.Tensor, "item", counted_item)
    dm = FakeLMDataModule(batch_size=2, seq_len=8, vocab_size=16, n_train=64)
    model = GPT(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=16, attention="sdpa")
    trainer = L.Trainer(accelerator="cpu", max_steps=10, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, limit_val_batches=0, log_every_n_steps=4,
                        callbacks=[ProgressBar(refresh_rate=4)])
    trainer.fit(LanguageModelingTask(model), datamodule=dm)
    assert sorted(set(redraws)) == [4, 8, 10]  # every 4th step and the last one
    assert all("train/loss" in metrics for metrics in shown)
    assert not lightning_reads
