"""Language modeling (GPT): next-token cross entropy; logs loss and perplexity."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fa_train.tasks.base import TaskModule, batch_get


class LanguageModelingTask(TaskModule):
    """Batch: {"input_ids": (B, N), "labels": (B, N)} (labels already shifted, -100 ignored),
    a tuple (input_ids, labels), or {"input_ids": (B, N+1)} alone (shifted here).

    The model is called as ``model(input_ids, targets=labels)`` and returns the mean loss (as
    fa_train.models.GPT does), so a compiled model computes the loss inside its graph.
    Logs ``{stage}/loss`` and, for val/test, ``{stage}/ppl`` = exp(token-weighted mean loss).
    ``loss_by_position``: val/test also log ``{stage}/loss_pos{lo}-{hi}``, the loss of the tokens
    at positions lo..hi-1 of their window (0-1, 1-2, 2-4, 4-8, ..., N/2-N): how much a model gains
    from context further back (the eval steps then compute the loss from the logits).
    """

    def __init__(self, *args, loss_by_position: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_by_position = bool(loss_by_position)
        self._eval_sums: dict[str, list[float]] = {}
        # stage -> (loss sum and token count per position bucket (2, buckets), window length)
        self._position_sums: dict[str, tuple[torch.Tensor, int]] = {}

    def step(self, batch, stage):
        x = batch_get(batch, "input_ids", "x", index=0)
        y = batch_get(batch, "labels", "targets", "y", index=1)
        if y is None:
            x, y = x[:, :-1], x[:, 1:]
        if stage != "train" and self.loss_by_position:
            loss = self._loss_by_position(stage, self(x), y)
        else:
            loss = self(x, targets=y)
        if stage == "train":
            self.count_tokens(x.numel())
            # not prog_bar: Lightning would read it back from the GPU after every step; the
            # progress bar shows it from the callback metrics when it redraws
            if self.logs_now(stage):
                self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=x.shape[0])
        else:
            n = int((y != -100).sum())
            acc = self._eval_sums.setdefault(stage, [0.0, 0])
            acc[0] += float(loss.detach()) * n
            acc[1] += n
            self.log(f"{stage}/loss", loss, prog_bar=stage == "val", on_step=False, on_epoch=True,
                     sync_dist=True, batch_size=x.shape[0])
        return loss

    def _loss_by_position(self, stage, logits, y):
        """The mean loss of a batch from its logits; adds each token's loss to its position's
        bucket (bucket 0: position 0, bucket b: positions 2^(b-1) .. 2^b - 1)."""
        per_token = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-100,
                                    reduction="none").view_as(y)
        counted = (y != -100)
        positions = torch.arange(y.shape[1], device=y.device)
        bucket = torch.where(positions > 0, torch.log2(positions.clamp(min=1).double()).floor().long() + 1, 0)
        sums, _ = self._position_sums.setdefault(stage, (
            torch.zeros(2, int(bucket[-1]) + 1, dtype=torch.float64, device=y.device), y.shape[1]))
        sums[0].index_add_(0, bucket, (per_token * counted).sum(0).double())
        sums[1].index_add_(0, bucket, counted.sum(0).double())
        return (per_token * counted).sum() / counted.sum().clamp(min=1)

    def _log_ppl(self, stage):
        total, n = self._eval_sums.pop(stage, [0.0, 0])
        t = torch.tensor([total, float(n)], dtype=torch.float64, device=self.device)
        if self.trainer is not None and self.trainer.world_size > 1:
            t = self.trainer.strategy.reduce(t, reduce_op="sum")
        if t[1] > 0:
            self.log(f"{stage}/ppl", perplexity(float(t[0] / t[1])), sync_dist=False)
        if stage not in self._position_sums:
            return
        sums, length = self._position_sums.pop(stage)
        if self.trainer is not None and self.trainer.world_size > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        for b, (total, n) in enumerate(sums.T.tolist()):
            if n > 0:
                lo, hi = (0, 1) if b == 0 else (2 ** (b - 1), min(2 ** b, length))
                self.log(f"{stage}/loss_pos{lo}-{hi}", total / n, sync_dist=False)

    def on_validation_epoch_end(self):
        self._log_ppl("val")

    def on_test_epoch_end(self):
        self._log_ppl(self.test_stage)


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))
