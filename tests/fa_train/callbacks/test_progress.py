"""The progress bar reads the logged metrics (a GPU-to-host copy of the loss) only on redraws."""
import lightning as L

from fa_train.callbacks import ProgressBar
from fa_train.models import GPT
from fa_train.tasks import LanguageModelingTask
from fa_train.utils.fake_data import FakeLMDataModule


def test_progress_bar_reads_metrics_only_when_it_redraws(monkeypatch):
    reads = []
    original = ProgressBar.get_metrics

    def spy(self, trainer, pl_module):
        if trainer.training:
            reads.append(trainer.global_step)
        return original(self, trainer, pl_module)

    monkeypatch.setattr(ProgressBar, "get_metrics", spy)
    dm = FakeLMDataModule(batch_size=2, seq_len=8, vocab_size=16, n_train=64)
    model = GPT(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=16, attention="sdpa")
    trainer = L.Trainer(accelerator="cpu", max_steps=10, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, limit_val_batches=0,
                        callbacks=[ProgressBar(refresh_rate=4)])
    trainer.fit(LanguageModelingTask(model), datamodule=dm)
    assert sorted(set(reads)) == [4, 8, 10]  # every 4th step and the last one
