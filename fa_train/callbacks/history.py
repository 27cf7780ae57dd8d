"""Keeps train and validation loss per step in memory; train.py plots them (loss_curve.png).

Losses are stored as detached tensors and read only at the end, so no GPU sync per step.
"""
from __future__ import annotations

import lightning as L
import torch


class LossHistory(L.Callback):
    def __init__(self):
        super().__init__()
        self._train: list[tuple[int, object]] = []
        self.val: list[tuple[int, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not torch.is_tensor(loss) or not trainer.is_global_zero:
            return
        loss = loss.detach() * trainer.accumulate_grad_batches  # Lightning divides it per micro-batch
        step = trainer.global_step  # one point per optimizer step (its last micro-batch)
        if self._train and self._train[-1][0] == step:
            self._train[-1] = (step, loss)
        else:
            self._train.append((step, loss))

    @property
    def train(self) -> list[tuple[int, float]]:
        self._train = [(s, float(v)) for s, v in self._train]
        return self._train

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        v = trainer.callback_metrics.get("val/loss")
        if v is not None:
            self.val.append((trainer.global_step, float(v)))

    def state_dict(self):
        return {"train": self.train, "val": self.val}

    def load_state_dict(self, state):
        self._train = [tuple(x) for x in state.get("train", [])]
        self.val = [tuple(x) for x in state.get("val", [])]
