"""Self-pretraining on a task's own sequences (Pathfinder images before their labels are used):
a random share `mask_prob` of the real tokens is replaced by the mask id — the model's last
vocabulary id, one past the data's — and predicted from the others through the tied input
embedding. Fine-tuning starts from the run (init_from=...; the mask id's row is dropped).

Batch: {"input_ids" (B, N), "attention_mask" bool, labels unused}. Logs masked-token loss and
accuracy as {stage}/loss and {stage}/acc, and beside them {stage}/acc_majority: the accuracy of
always answering the commonest hidden token of the batch (on Pathfinder images, black), the level
that knowing only how often each token occurs reaches.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fa_train.errors import UserError, check_float
from fa_train.tasks.base import TaskModule, batch_get


class MaskedTokenTask(TaskModule):
    def __init__(self, *args, mask_prob: float = 0.15, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_prob = check_float("task.mask_prob", mask_prob, 0.0, 1.0, low_open=True,
                                     high_open=True)
        cfg = self.model.config
        if getattr(cfg, "input_type", None) != "token" or getattr(cfg, "num_towers", 1) != 1:
            raise UserError("task=masked_tokens needs a one-tower classifier over token ids "
                            "(model.input_type=token)")
        self.mask_id = cfg.vocab_size - 1

    def configure_model(self):
        if self.compile and self._compiled is None:   # the encoder, not the sparse head
            object.__setattr__(self, "_compiled",
                               torch.compile(self.model.hidden, mode=self.compile_mode))

    def on_fit_start(self):
        super().on_fit_start()
        data_vocab = self.trainer.datamodule.spec().vocab_size
        if data_vocab is not None and data_vocab > self.mask_id:
            raise UserError(f"task=masked_tokens needs model.vocab_size={data_vocab + 1} (the "
                            f"data's {data_vocab} ids and a mask id), got {self.mask_id + 1}")

    def masked_positions(self, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Each real token with probability mask_prob, and at least one per sequence."""
        draw = torch.rand(ids.shape, device=ids.device).masked_fill(~real, 2.0)
        chosen = (draw < self.mask_prob) & real
        rows = torch.arange(ids.shape[0], device=ids.device)
        first = draw.argmin(dim=1)
        chosen[rows, first] = real[rows, first]
        return chosen

    def step(self, batch, stage):
        ids = batch_get(batch, "input_ids", "inputs", index=0)
        mask = batch_get(batch, "attention_mask")
        cfg = self.model.config
        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.to(torch.bool)
        if cfg.mask_pad_tokens:
            real = real & (ids != cfg.pad_token_id)
        chosen = self.masked_positions(ids, real)
        hidden = (self._compiled or self.model.hidden)(ids.masked_fill(chosen, self.mask_id), mask)[0]
        if cfg.pool == "cls":
            hidden = hidden[:, 1:]
        logits = self.model.token_logits(hidden[chosen])[:, : self.mask_id]
        targets = ids[chosen]
        loss = F.cross_entropy(logits.float(), targets)
        if stage == "train":
            self.count_tokens(ids.numel())
        if not self.logs_now(stage):
            return loss
        with torch.no_grad():
            acc = (logits.argmax(-1) == targets).float().mean()
            majority = torch.bincount(targets).max().float() / targets.numel()
        on_step, bs = stage == "train", ids.shape[0]
        self.log(f"{stage}/loss", loss, prog_bar=not on_step, on_step=on_step,
                 on_epoch=not on_step, sync_dist=not on_step, batch_size=bs)
        self.log(f"{stage}/acc", acc, prog_bar=not on_step, on_step=on_step, on_epoch=not on_step,
                 sync_dist=not on_step, batch_size=bs)
        self.log(f"{stage}/acc_majority", majority, on_step=on_step, on_epoch=not on_step,
                 sync_dist=not on_step, batch_size=bs)
        return loss
