"""Sequence classification (LRA, long documents) and two-tower retrieval.

Batch: {"input_ids" (B, N) — (B, 2, N) for two towers, "attention_mask" bool, "labels"}:
labels int64 (B,) for single-label (cross entropy, accuracy) or float multi-hot (B, C) for
multi-label (BCE with logits, micro-F1 at threshold 0.5, and subset accuracy).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fa_train.tasks.base import TaskModule, batch_get


class ClassificationTask(TaskModule):
    def __init__(self, *args, multi_label: bool | None = None, threshold: float = 0.5, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = getattr(self.model, "config", None)
        self.multi_label = bool(multi_label if multi_label is not None
                                else getattr(cfg, "multi_label", False))
        self.threshold = threshold
        self._f1 = {}

    def step(self, batch, stage):
        ids = batch_get(batch, "input_ids", "inputs", index=0)
        mask = batch_get(batch, "attention_mask")
        labels = batch_get(batch, "labels", "label", index=1)
        logits = self(ids, mask)
        bs = ids.shape[0]
        if stage == "train":
            self.count_tokens(ids.numel())  # padded tokens: no GPU sync
        if self.multi_label or labels.dim() == 2:
            target = labels.float()
            loss = F.binary_cross_entropy_with_logits(logits.float(), target)
            with torch.no_grad():
                pred = torch.sigmoid(logits.float()) > self.threshold
                t = target > 0.5
                tp = (pred & t).sum().float()
                fp = (pred & ~t).sum().float()
                fn = (~pred & t).sum().float()
                acc = (pred == t).all(dim=-1).float().mean()
            if stage != "train":
                s = self._f1.setdefault(stage, torch.zeros(3, device=logits.device))
                s += torch.stack([tp, fp, fn])
            elif self.logs_now(stage):
                self.log("train/f1", 2 * tp / (2 * tp + fp + fn).clamp(min=1), on_step=True,
                         batch_size=bs)
        else:
            loss = F.cross_entropy(logits.float(), labels)
            with torch.no_grad():
                acc = (logits.argmax(-1) == labels).float().mean()
        if not self.logs_now(stage):
            return loss
        on_step = stage == "train"
        # training metrics stay off prog_bar (a GPU read per step); the bar shows them anyway
        self.log(f"{stage}/loss", loss, prog_bar=not on_step, on_step=on_step,
                 on_epoch=not on_step, sync_dist=not on_step, batch_size=bs)
        self.log(f"{stage}/acc", acc, prog_bar=not on_step, on_step=on_step, on_epoch=not on_step,
                 sync_dist=not on_step, batch_size=bs)
        return loss

    def _log_f1(self, stage):
        s = self._f1.pop(stage, None)
        if s is None:
            return
        if self.trainer is not None and self.trainer.world_size > 1:
            s = self.trainer.strategy.reduce(s, reduce_op="sum")
        tp, fp, fn = s
        self.log(f"{stage}/micro_f1", float(2 * tp / (2 * tp + fp + fn).clamp(min=1)))

    def on_validation_epoch_end(self):
        self._log_f1("val")

    def on_test_epoch_end(self):
        self._log_f1(self.test_stage)


class RetrievalTask(ClassificationTask):
    """Two-tower retrieval (LRA AAN): the model's two-tower head does the pairing; same metrics."""
