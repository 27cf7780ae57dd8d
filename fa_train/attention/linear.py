"""linear: Linear Attention (Katharopoulos et al., 2020, "Transformers are RNNs"): softmax(q k^T)
is replaced by phi(q) phi(k)^T with the feature map phi(x) = elu(x) + 1, so attention costs
O(N d^2) instead of O(N^2 d). The causal form keeps running sums of phi(k) v^T, computed chunk by
chunk: within a chunk the masked quadratic form, across chunks prefix sums of the chunk totals.

`kernelized_attention` is the part shared with Performer (any positive feature map)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fa_train.attention.base import Attention
from fa_train.attention.module import check_int_options, heads_first


def _normalized(num, den):
    """num / den with rows whose keys are all masked (den == 0) giving zeros, never NaN."""
    return num / den.clamp_min(torch.finfo(den.dtype).tiny)[..., None]


def _causal_in_chunks(phi_q, phi_k, v, chunk):
    """Causal kernelized attention, (B, H, N, d): chunked prefix sums of phi(k) v^T."""
    n = phi_q.shape[-2]
    pad = -n % chunk
    phi_q, phi_k, v = (F.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, v))  # zero rows add 0
    split = lambda t: t.unflatten(-2, (-1, chunk))  # noqa: E731  (B, H, n_chunks, chunk, .)
    phi_q, phi_k, v = split(phi_q), split(phi_k), split(v)
    kv = torch.einsum("bhncm,bhncd->bhnmd", phi_k, v)
    k_sum = phi_k.sum(dim=-2)
    kv_before = kv.cumsum(dim=2) - kv            # sums over the earlier chunks
    k_before = k_sum.cumsum(dim=2) - k_sum
    scores = torch.einsum("bhncm,bhnkm->bhnck", phi_q, phi_k).tril()
    num = torch.einsum("bhncm,bhnmd->bhncd", phi_q, kv_before) + scores @ v
    den = torch.einsum("bhncm,bhnm->bhnc", phi_q, k_before) + scores.sum(dim=-1)
    return _normalized(num, den).flatten(2, 3)[..., :n, :]


def kernelized_attention(phi_q, phi_k, v, causal=False, chunk=64):
    """Attention with weights phi(q_i) . phi(k_j), normalized per query, (B, H, N, d).

    phi_q, phi_k: (B, H, N, m) nonnegative features (padded keys: zero rows); v: (B, H, N, d).
    causal: query i sees keys j <= i (self-attention: as many queries as keys).
    """
    if not causal:
        num = phi_q @ (phi_k.transpose(-2, -1) @ v)
        return _normalized(num, (phi_q * phi_k.sum(dim=-2, keepdim=True)).sum(dim=-1))
    if phi_q.shape[-2] != phi_k.shape[-2]:
        raise ValueError(f"causal kernelized attention needs as many queries as keys, got "
                         f"{phi_q.shape[-2]} and {phi_k.shape[-2]}")
    return _causal_in_chunks(phi_q, phi_k, v, chunk)


def zero_padded_keys(phi_k, key_padding_mask):
    """Features of padded keys set to zero (they then add nothing to any sum), (B, H, N, m)."""
    if key_padding_mask is None:
        return phi_k
    return phi_k * key_padding_mask[:, None, :, None].to(phi_k.dtype)


@dataclass(frozen=True)
class LinearConfig:
    chunk_size: int = 64   # causal form: tokens per chunk of the prefix sums

    def __post_init__(self):
        check_int_options(self, chunk_size=1)


class LinearAttention(Attention):
    """elu + 1 features; no softmax, so no softmax_scale and no attention-probability dropout."""

    name = "linear"
    supports = frozenset({"causal", "key_padding_mask", "varlen"})
    Config = LinearConfig

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        if softmax_scale is not None:
            raise ValueError("attention impl 'linear' has no softmax: softmax_scale must be None, "
                             f"got {softmax_scale}")
        qh, kh, vh = heads_first(q, k, v, upcast=True)  # sums over the sequence in float32
        phi_q, phi_k = F.elu(qh) + 1, zero_padded_keys(F.elu(kh) + 1, key_padding_mask)
        out = kernelized_attention(phi_q, phi_k, vh, causal, self.config.chunk_size)
        return out.transpose(1, 2).to(q.dtype)
