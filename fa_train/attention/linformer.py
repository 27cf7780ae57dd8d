"""linformer: Linformer (Wang et al., 2020): keys and values are projected along the sequence to
`k` rows by learned matrices E and F (k x max_seq_len), and softmax attention runs against those k
rows: O(N k) time and memory. A sequence shorter than max_seq_len uses the first N columns.

E and F are parameters of this module; the model's layers share one attention object, so they
are shared by all heads and layers (the Linformer paper's "layerwise" sharing). max_seq_len is
the model's unless the config names one (build_attention passes it). There is no causal form:
a projected row mixes every position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from fa_train.attention.module import (ModuleAttention, at_least_float32, check_int_options,
                                       heads_first, scale_of)
from fa_train.errors import UserError


@dataclass(frozen=True)
class LinformerConfig:
    k: int = 256                        # projected length
    max_seq_len: Optional[int] = None   # columns of E and F; None: the model's max_seq_len

    def __post_init__(self):
        check_int_options(self, k=1, max_seq_len=(1, None))


class LinformerAttention(ModuleAttention):
    name = "linformer"
    supports = frozenset({"key_padding_mask", "dropout", "varlen"})
    Config = LinformerConfig

    def __init__(self, config: LinformerConfig | None = None):
        super().__init__(config)
        k, n = self.config.k, self.config.max_seq_len
        if n is None:
            raise UserError("attention impl 'linformer' needs max_seq_len (the longest sequence, "
                             "the width of its projections): set attention.max_seq_len")
        self.E = nn.Parameter(torch.randn(k, n) / k ** 0.5)
        self.F = nn.Parameter(torch.randn(k, n) / k ** 0.5)

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        n, limit = k.shape[1], self.config.max_seq_len
        if n > limit:
            raise UserError(f"attention impl 'linformer' was built for sequences of at most "
                             f"max_seq_len = {limit} tokens, got {n}")
        qh, kh, vh = heads_first(q, k, v)
        if key_padding_mask is not None:  # padded keys and values join no projected row
            keep = key_padding_mask[:, None, :, None].to(kh.dtype)
            kh, vh = kh * keep, vh * keep
        kp = self.E[:, :n].to(kh.dtype) @ kh          # (B, H, k, d)
        vp = self.F[:, :n].to(vh.dtype) @ vh
        scores = at_least_float32(qh @ kp.transpose(-2, -1)) * scale_of(softmax_scale, q.shape[-1])
        probs = torch.softmax(scores, dim=-1).to(vp.dtype)
        if dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p, training=True)
        return (probs @ vp).transpose(1, 2)
