"""sdpa: PyTorch's fused attention (torch.nn.functional.scaled_dot_product_attention picks its
flash, memory-efficient, cuDNN or math backend by itself)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fa_train.attention.base import Attention
from fa_train.attention.padding import keep_mask


class SdpaAttention(Attention):
    name = "sdpa"
    supports = frozenset({"causal", "key_padding_mask", "dropout", "varlen"})

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        mask = None
        is_causal = causal
        if key_padding_mask is not None or (causal and q.shape[1] != k.shape[1]):
            mask = keep_mask(q, k, causal, key_padding_mask)
            is_causal = False
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, dropout_p=dropout_p,
                                             is_causal=is_causal, scale=softmax_scale)
        if mask is not None:  # rows with no visible key: zeros (sdpa's math path may give NaN)
            out = torch.nan_to_num(out, nan=0.0)
        return out.transpose(1, 2)
