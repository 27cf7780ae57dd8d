"""smyrf: SMYRF attention (Daras et al., 2020). Queries and keys are mapped by asymmetric
transforms F(q) = [q, 0, sqrt(M - |q|^2)] and G(k) = [k, sqrt(M - |k|^2), 0] (M = max |q|^2 +
max |k|^2 per head), under which near vectors are those of large inner product, then projected on
a random Gaussian direction (E2LSH) in each of `n_hashes` rounds. Sorting by the projection and
cutting into equal parts gives balanced clusters of `cluster_size` queries and keys; each query
cluster attends to its key cluster, and rounds are combined by their softmax normalizers
(fa_train.attention.bucketed). Projections are drawn anew at every call. No causal form.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fa_train.attention.base import Attention
from fa_train.attention.bucketed import (attend_in_chunks, key_validity, sort_rounds,
                                         unsort_and_combine)
from fa_train.attention.module import at_least_float32, check_int_options, heads_first, scale_of


@dataclass(frozen=True)
class SmyrfConfig:
    cluster_size: int = 128   # queries (and keys) per balanced cluster
    n_hashes: int = 2         # hashing rounds

    def __post_init__(self):
        check_int_options(self, cluster_size=1, n_hashes=1)


def asymmetric_hashes(q, k, n_hashes):
    """E2LSH projections of F(q) and G(k): two (B, H, R, N) tensors."""
    q, k = at_least_float32(q.detach()), at_least_float32(k.detach())
    q_sq, k_sq = q.pow(2).sum(-1, keepdim=True), k.pow(2).sum(-1, keepdim=True)
    top = q_sq.amax(dim=-2, keepdim=True) + k_sq.amax(dim=-2, keepdim=True)
    fq = torch.cat([q, torch.zeros_like(q_sq), (top - q_sq).clamp_min(0).sqrt()], dim=-1)
    gk = torch.cat([k, (top - k_sq).clamp_min(0).sqrt(), torch.zeros_like(k_sq)], dim=-1)
    directions = torch.randn(n_hashes, q.shape[-1] + 2, device=q.device, dtype=q.dtype)
    return (torch.einsum("bhnd,rd->bhrn", fq, directions),
            torch.einsum("bhnd,rd->bhrn", gk, directions))


class SmyrfAttention(Attention):
    name = "smyrf"
    supports = frozenset({"key_padding_mask", "dropout", "varlen"})
    Config = SmyrfConfig

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"attention impl 'smyrf' pairs query and key clusters: needs as many "
                             f"queries as keys, got {q.shape[1]} and {k.shape[1]}")
        qh, kh, vh = heads_first(q, k, v)
        q_hash, k_hash = asymmetric_hashes(qh, kh, self.config.n_hashes)
        q_order, k_order = q_hash.argsort(dim=-1), k_hash.argsort(dim=-1)
        out, lse = attend_in_chunks(
            sort_rounds(qh, q_order), sort_rounds(kh, k_order), sort_rounds(vh, k_order),
            q_order, k_order, key_validity(key_padding_mask, k_order),
            min(self.config.cluster_size, qh.shape[2]), scale_of(softmax_scale, q.shape[-1]),
            dropout_p=dropout_p)
        return unsort_and_combine(out, lse, q_order).transpose(1, 2).to(q.dtype)
