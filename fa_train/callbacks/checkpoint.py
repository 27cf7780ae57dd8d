"""``checkpoints/last.ckpt``: one file per run, rewritten atomically.

Saved every `every_n_train_steps` optimizer steps and inside the last training step (max_steps
reached, or a callback before this one stopped training there, as `PauseAfter` does), where
Lightning's loop state still says "mid-epoch, batch k": resuming from it continues at the same
step, epoch and data position. A run that ends otherwise (epochs, early stop) saves once more
at the end. Each save goes to a temporary file that replaces last.ckpt only once complete, so a
crash during a save leaves the previous checkpoint loadable, and no versioned copies
(last-v1.ckpt) ever appear. Weights that are no longer finite are never saved: a diverged run keeps
the checkpoint saved before.
"""
from __future__ import annotations

from pathlib import Path

import lightning as L

from fa_train.callbacks.divergence import parameters_finite
from fa_train.errors import check_int
from fa_train.utils.checkpoints import commit, partial_path


class LastCheckpoint(L.Callback):
    def __init__(self, dirpath: str, every_n_train_steps: int | None = 500,
                 filename: str = "last.ckpt"):
        super().__init__()
        if every_n_train_steps is not None:
            check_int("callbacks.checkpoint.every_n_train_steps", every_n_train_steps, low=0)
        self.path = Path(dirpath) / filename
        self.every = int(every_n_train_steps or 0)
        self.saved_step: int | None = None

    def save(self, trainer: L.Trainer) -> None:
        if not parameters_finite(trainer.lightning_module):
            return
        tmp = partial_path(self.path)
        trainer.save_checkpoint(tmp)  # every rank takes part; global rank 0 writes
        if trainer.is_global_zero:
            commit(tmp, self.path)
        self.saved_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == 0 or step == self.saved_step:
            return
        last = trainer.should_stop or (trainer.max_steps is not None
                                       and 0 < trainer.max_steps <= step)
        if last or (self.every and step % self.every == 0):
            self.save(trainer)

    def on_train_end(self, trainer, pl_module):
        if trainer.global_step != self.saved_step:
            self.save(trainer)
