"""Exact resume: a run stopped at step k and resumed from its checkpoint sees the same batches,
mid-epoch and across epoch boundaries, as a run that never stopped."""
from __future__ import annotations

import lightning as L
import pytest
import torch

from fa_train.data.lm import LMDataModule


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["input_ids"][:, 0].tolist())
        return (self.w * batch["input_ids"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(dm, max_steps, root, ckpt_path=None):
    model = Recorder()
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=7, save_top_k=-1)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, callbacks=[ckpt],
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model.seen, sorted(root.glob("*.ckpt"))


@pytest.mark.filterwarnings("ignore:.*(val_dataloader|dirpath has changed|LeafSpec).*")
def test_lightning_resume_continues_with_the_next_batch(tiny_corpus, tmp_path):
    def dm():  # 5 batches per epoch: the stop at step 7 is mid-epoch 1
        return LMDataModule(source="json", data_files={s: str(p) for s, p in tiny_corpus.items()}, vocab_size=300,
                            seq_len=8, batch_size=4, cache_dir=str(tmp_path / "cache"), seed=3,
                            train_samples_per_epoch=20)

    straight, _ = _fit(dm(), 12, tmp_path / "a")
    first, ckpts = _fit(dm(), 7, tmp_path / "b")
    assert len(first) == 7 and ckpts
    rest, _ = _fit(dm(), 12, tmp_path / "c", ckpt_path=str(ckpts[-1]))
    assert first + rest == straight
    assert straight[:5] != straight[5:10]  # epochs draw different windows
