"""Language modeling (GPT): next-token cross entropy; logs loss and perplexity."""
from __future__ import annotations

import math

import torch

from fa_train.tasks.base import TaskModule, batch_get


class LanguageModelingTask(TaskModule):
    """Batch: {"input_ids": (B, N), "labels": (B, N)} (labels already shifted, -100 ignored),
    a tuple (input_ids, labels), or {"input_ids": (B, N+1)} alone (shifted here).

    The model is called as ``model(input_ids, targets=labels)`` and returns the mean loss (as
    fa_train.models.GPT does), so a compiled model computes the loss inside its graph.
    Logs ``{stage}/loss`` and, for val/test, ``{stage}/ppl`` = exp(token-weighted mean loss).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._eval_sums: dict[str, list[float]] = {}

    def step(self, batch, stage):
        x = batch_get(batch, "input_ids", "x", index=0)
        y = batch_get(batch, "labels", "targets", "y", index=1)
        if y is None:
            x, y = x[:, :-1], x[:, 1:]
        loss = self(x, targets=y)
        if stage == "train":
            self.count_tokens(x.numel())
            # not prog_bar: Lightning would read it back from the GPU after every step; the
            # progress bar shows it from the callback metrics when it redraws
            self.log("train/loss", loss, on_step=True, on_epoch=False,
                     batch_size=x.shape[0])
        else:
            n = int((y != -100).sum())
            acc = self._eval_sums.setdefault(stage, [0.0, 0])
            acc[0] += float(loss.detach()) * n
            acc[1] += n
            self.log(f"{stage}/loss", loss, prog_bar=stage == "val", on_step=False, on_epoch=True,
                     sync_dist=True, batch_size=x.shape[0])
        return loss

    def _log_ppl(self, stage):
        total, n = self._eval_sums.pop(stage, [0.0, 0])
        t = torch.tensor([total, float(n)], dtype=torch.float64, device=self.device)
        if self.trainer is not None and self.trainer.world_size > 1:
            t = self.trainer.strategy.reduce(t, reduce_op="sum")
        if t[1] > 0:
            self.log(f"{stage}/ppl", perplexity(float(t[0] / t[1])), sync_dist=False)

    def on_validation_epoch_end(self):
        self._log_ppl("val")

    def on_test_epoch_end(self):
        self._log_ppl(self.test_stage)


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))
