"""Masked language modeling (BERT): loss on masked positions only; logs masked accuracy.

Batch: {"input_ids", "attention_mask" (True = real token), "labels" (-100 where not masked),
optional "mlm_positions" (the masked positions of the flattened batch), optional
"token_positions", "cu_seqlens" and "max_seqlen" (the real tokens' positions and lengths, for the
unpadded encoder), optional "token_type_ids", optional "next_sentence_label" (with model.nsp)}.
The MLM head runs only on the masked positions (as MLPerf BERT does). Positions a batch does not
list are found on the device, where counting them makes the host wait for the GPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fa_train.tasks.base import TaskModule, batch_get


class MaskedLMTask(TaskModule):
    def configure_model(self):
        if self.compile and self._compiled is None:  # compile the encoder, not the sparse head
            object.__setattr__(self, "_compiled",
                               torch.compile(self.model.encode, mode=self.compile_mode))

    def step(self, batch, stage):
        ids = batch_get(batch, "input_ids", index=0)
        mask = batch_get(batch, "attention_mask")
        labels = batch_get(batch, "labels", index=1)
        types = batch_get(batch, "token_type_ids")
        model = self.model
        if self._compiled is not None:  # runs padded: a packed layout's token count would vary
            hidden = self._compiled(ids, mask, types)
        else:
            packing = (batch_get(batch, "token_positions"), batch_get(batch, "cu_seqlens"),
                       batch_get(batch, "max_seqlen"))
            complete = all(p is not None for p in packing)
            hidden = model.encode(ids, mask, types, packing=packing if complete else None)
        positions = batch_get(batch, "mlm_positions")
        if positions is None:
            positions = labels.flatten().ne(-100).nonzero().squeeze(1)
        mlm_logits = model.mlm_logits(hidden.flatten(0, 1).index_select(0, positions))
        mlm_labels = labels.flatten().index_select(0, positions)
        nsp = model.nsp_logits(hidden)
        loss = F.cross_entropy(mlm_logits.float(), mlm_labels)
        nsp_label = batch_get(batch, "next_sentence_label", "nsp_labels")
        if nsp is not None and nsp_label is not None:
            loss = loss + F.cross_entropy(nsp.float(), nsp_label)
        if stage == "train":
            self.count_tokens(ids.numel())  # padded tokens: no GPU sync
        if not self.logs_now(stage):
            return loss
        with torch.no_grad():
            acc = (mlm_logits.argmax(-1) == mlm_labels).float().mean()
        on_step = stage == "train"
        bs = ids.shape[0]
        # training metrics stay off prog_bar (a GPU read per step); the bar shows them anyway
        self.log(f"{stage}/loss", loss, prog_bar=not on_step, on_step=on_step, on_epoch=not on_step,
                 sync_dist=not on_step, batch_size=bs)
        self.log(f"{stage}/mlm_acc", acc, prog_bar=stage != "train", on_step=on_step,
                 on_epoch=not on_step, sync_dist=not on_step, batch_size=bs)
        return loss
