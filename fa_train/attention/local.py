"""local: sliding-window (local) attention, the Local Attention baseline of the paper's Table 3.

Query i sees the keys from `window_left` before its diagonal to `window_right` after it (the
diagonal aligned bottom-right as in flash-attn: i + Nk - Nq; -1 = unbounded on that side; causal
calls see none after it). On CUDA tensors (and under TRITON_INTERPRET=1) our flash kernels run
with the window and skip the key tiles outside it, so the cost grows linearly in N; elsewhere
PyTorch SDPA takes the window as a boolean mask. A window as wide as the sequence is exact
attention.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fa_train.attention.base import Attention
from fa_train.attention.flash import FlashAttention, triton_runs_on
from fa_train.attention.padding import keep_mask, run_varlen_by_padding
from fa_train.errors import check_int


@dataclass(frozen=True)
class LocalOptions:
    """window_left, window_right: keys each side of the diagonal a query sees (-1 = unbounded);
    deterministic: as flash's (a backward without atomics)."""
    window_left: int = 256
    window_right: int = 256
    deterministic: bool = False

    def __post_init__(self):
        for name in ("window_left", "window_right"):  # -1 = unbounded
            check_int(f"attention.{name}", getattr(self, name), low=-1)

    @property
    def window(self) -> tuple[int, int]:
        return self.window_left, self.window_right


class LocalAttention(FlashAttention):
    name = "local"
    runs_triton = False  # masked SDPA where Triton does not run
    Config = LocalOptions

    def kernel_options(self):
        return dict(super().kernel_options(), window_size=self.config.window)

    def supports_varlen(self, device):
        return triton_runs_on(device)

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None,
                cu_seqlens=None, max_seqlen=None):
        if triton_runs_on(q.device):
            return super().forward(q, k, v, causal, dropout_p, softmax_scale, key_padding_mask,
                                   cu_seqlens, max_seqlen)
        if cu_seqlens is not None:
            return run_varlen_by_padding(self.masked_sdpa, q, k, v, cu_seqlens, max_seqlen,
                                         causal=causal, dropout_p=dropout_p,
                                         softmax_scale=softmax_scale)
        return self.masked_sdpa(q, k, v, causal, dropout_p, softmax_scale, key_padding_mask)

    def masked_sdpa(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        """PyTorch SDPA with the window, causal and padding as one boolean mask."""
        mask = keep_mask(q, k, causal, key_padding_mask, self.config.window)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
            dropout_p=dropout_p, scale=softmax_scale, enable_gqa=q.shape[2] != k.shape[2])
        # rows with no visible key: zeros (sdpa's math path may give NaN)
        return torch.nan_to_num(out, nan=0.0).transpose(1, 2)

    def packed(self, qkv, **kwargs):
        if triton_runs_on(qkv.device):
            return super().packed(qkv, **kwargs)
        return Attention.packed(self, qkv, **kwargs)
