"""Stopping a run whose training has diverged, instead of training on NaN to the last step.

Every `CHECK_EVERY` optimizer steps the run is checked: it has diverged when a parameter is not
finite (NaN or inf weights never recover), or when the training loss was not finite at two checks
in a row (fp16 loss scaling skips single overflowing steps, so one non-finite loss is not yet
divergence). A diverged run stops at once: metrics.json records status "diverged" and the step, the
test pass is skipped, and the last checkpoint is the one saved before (the non-finite weights are
not saved). With several processes the ranks decide together at each check (one all-reduce).
"""
from __future__ import annotations

import math

import lightning as L
import torch

CHECK_EVERY = 50


def loss_of(outputs) -> float | None:
    """The training step's loss as a float (None when the step returned none)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else None


def parameters_finite(module: torch.nn.Module) -> bool:
    flags = [torch.isfinite(p.detach()).all() for p in module.parameters()]
    return bool(torch.stack(flags).all()) if flags else True


class StopOnDivergence(L.Callback):
    def __init__(self, every: int = CHECK_EVERY):
        super().__init__()
        if int(every) < 1:
            raise ValueError(f"every must be at least 1 step, got {every}")
        self.every = int(every)
        self.diverged_at: int | None = None   # the optimizer step at which it was seen
        self.reason = ""
        self._bad_losses = 0
        self._checked_step: int | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every or step == self._checked_step or self.diverged_at is not None:
            return
        self._checked_step = step
        loss = loss_of(outputs)
        self._bad_losses = self._bad_losses + 1 if loss is not None and not math.isfinite(loss) else 0
        reason = ("parameters not finite" if not parameters_finite(pl_module) else
                  "training loss not finite at two checks in a row" if self._bad_losses >= 2 else "")
        diverged = bool(reason)
        if trainer.world_size > 1:
            diverged = trainer.strategy.reduce_boolean_decision(diverged, all=False)
        if diverged:
            self.diverged_at = step
            self.reason = reason or "seen by another process"
            trainer.should_stop = True
