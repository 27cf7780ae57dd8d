"""Rich progress bar that reads well for step-based runs (no "Epoch 0/-2") and reads the logged
metrics only when it redraws: reading them copies the loss back from the GPU, which waits for the
step to finish, so doing it every step would keep the host from running ahead of the GPU.

Training metrics are therefore logged without ``prog_bar`` (Lightning converts progress-bar metrics
to Python numbers after every batch) and the bar takes them from the callback metrics instead."""
from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class ProgressBar(RichProgressBar):
    TRAIN_METRICS = ("train/loss", "train/acc")  # shown while training, read at redraws only

    def _get_train_description(self, current_epoch: int) -> str:
        t = self.trainer
        if t.max_epochs is not None and t.max_epochs > 0:
            desc = f"Epoch {current_epoch}/{t.max_epochs - 1}"
        elif t.max_steps and t.max_steps > 0:
            desc = f"Epoch {current_epoch} (max_steps {t.max_steps})"
        else:
            desc = f"Epoch {current_epoch}"
        if len(self.validation_description) > len(desc):
            desc = f"{desc:{len(self.validation_description)}}"
        return desc

    def _update_metrics(self, trainer, pl_module) -> None:
        last = bool(trainer.max_steps and trainer.global_step >= trainer.max_steps)
        if trainer.training and trainer.global_step % max(1, self.refresh_rate) and not last:
            return
        super()._update_metrics(trainer, pl_module)

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        for name in self.TRAIN_METRICS:
            value = trainer.callback_metrics.get(name)
            if value is not None:
                items[name] = float(value)
        return items
