"""standard: materialized attention, the paper's baseline (scores in (B, H, N, N), masks, fp32
softmax, torch dropout, matmul, as Hugging Face and Megatron do)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fa_train.attention.base import Attention
from fa_train.attention.padding import keep_mask


class StandardAttention(Attention):
    name = "standard"
    supports = frozenset({"causal", "key_padding_mask", "dropout", "varlen"})

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, N, d)
        scores = torch.matmul(qh, kh.transpose(-2, -1)) * scale
        keep = keep_mask(q, k, causal, key_padding_mask)
        if keep is not None:
            scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores.float(), dim=-1)
        if keep is not None:  # fully masked rows give zeros, never NaN
            probs = probs.masked_fill(~keep, 0.0)
        probs = probs.to(q.dtype)
        if dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p, training=True)
        return torch.matmul(probs, vh).transpose(1, 2)
