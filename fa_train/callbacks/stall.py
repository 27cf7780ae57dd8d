"""Stopping a classifier run that can no longer learn, instead of training it to the last step.

A classifier's head (pooled feature -> Linear -> ReLU -> Linear) can die: once every hidden ReLU
unit is inactive for every input, the logits are the same for all inputs and no gradient reaches
the head's first layer or anything below it, so no later step can change that. Every
`CHECK_EVERY` optimizer steps, before the step, the gradients of the model's parameters outside
its `head` are read: when they are all exactly zero at two checks in a row the run has stalled
and stops there (metrics.json: status "stalled", the step, the test pass skipped; its checkpoint
is kept). Models without a `head` (language models) are never checked. With several processes
the ranks decide together at each check (one all-reduce).
"""
from __future__ import annotations

import lightning as L
import torch

from fa_train.callbacks.divergence import CHECK_EVERY

REASON = ("no gradient reaches the layers below the classifier head at two checks in a row "
          "(its hidden units are inactive for every input: the logits no longer depend on it)")


def body_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The trainable parameters outside `model.head` (none when the model has no head)."""
    head = getattr(model, "head", None)
    if not isinstance(head, torch.nn.Module):
        return []
    in_head = {id(p) for p in head.parameters()}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in in_head]


def gradient_is_zero(params: list[torch.nn.Parameter]) -> bool:
    """Whether every gradient of `params` is missing or exactly zero (one device read)."""
    grads = [p.grad.detach().abs().amax() for p in params if p.grad is not None]
    return not grads or float(torch.stack(grads).amax()) == 0.0


class StopOnStall(L.Callback):
    def __init__(self, every: int = CHECK_EVERY):
        super().__init__()
        if int(every) < 1:
            raise ValueError(f"every must be at least 1 step, got {every}")
        self.every = int(every)
        self.stalled_at: int | None = None   # the optimizer step at which it was seen
        self.reason = ""
        self._zero_checks = 0
        self._checked_step: int | None = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        step = trainer.global_step
        if step % self.every or step == self._checked_step or self.stalled_at is not None:
            return
        params = body_parameters(getattr(pl_module, "model", pl_module))
        if not params:
            return
        self._checked_step = step
        self._zero_checks = self._zero_checks + 1 if gradient_is_zero(params) else 0
        stalled = self._zero_checks >= 2
        if trainer.world_size > 1:
            stalled = trainer.strategy.reduce_boolean_decision(stalled, all=False)
        if stalled:
            self.stalled_at = step
            self.reason = REASON if self._zero_checks >= 2 else "seen by another process"
            trainer.should_stop = True
