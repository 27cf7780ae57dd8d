"""reformer: LSH attention of the Reformer (Kitaev et al., 2020). Queries and keys are shared
(keys = queries scaled to unit length; the model's key projection is not read), hashed by random
rotations into `n_buckets` buckets (argmax over [xR, -xR]) in each of `n_hashes` rounds, sorted by
(bucket, position) and cut into chunks of `bucket_size`; a chunk attends to itself and the chunk
before it, a token to its own position only when nothing else is visible. Rounds are combined by
their softmax normalizers (fa_train.attention.bucketed). Rotations are drawn anew at every call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from fa_train.attention.base import Attention
from fa_train.attention.bucketed import (attend_in_chunks, key_validity, sort_rounds,
                                         unsort_and_combine)
from fa_train.attention.module import check_int_options, heads_first, scale_of
from fa_train.errors import UserError

SELF_SCORE = -5e4  # a token's score against itself (the Reformer's value)


@dataclass(frozen=True)
class ReformerConfig:
    bucket_size: int = 64              # tokens per chunk
    n_hashes: int = 4                  # hashing rounds
    n_buckets: Optional[int] = None    # 1 or even; None: seq_len / bucket_size (rounded up to even)

    def __post_init__(self):
        check_int_options(self, bucket_size=1, n_hashes=1, n_buckets=(1, None))
        if self.n_buckets is not None and self.n_buckets > 1 and self.n_buckets % 2:
            raise UserError(f"attention.n_buckets must be 1 or even (random-rotation hashing), "
                             f"got {self.n_buckets}")


def lsh_buckets(x, n_buckets, n_hashes):
    """(B, H, R, N) bucket ids of x (B, H, N, d) under `n_hashes` random rotations."""
    b, h, n, d = x.shape
    if n_buckets == 1:
        return torch.zeros(b, h, n_hashes, n, dtype=torch.long, device=x.device)
    rotations = torch.randn(d, n_hashes, n_buckets // 2, device=x.device, dtype=x.dtype)
    rotated = torch.einsum("bhnd,drk->bhrnk", x.detach(), rotations)
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


class ReformerAttention(Attention):
    name = "reformer"
    supports = frozenset({"causal", "key_padding_mask", "dropout", "varlen"})
    Config = ReformerConfig

    def n_buckets(self, seqlen):
        """The configured bucket count, or seqlen / bucket_size rounded up to even (1 if <= 1)."""
        if self.config.n_buckets is not None:
            return self.config.n_buckets
        n = seqlen // self.config.bucket_size
        return 1 if n <= 1 else n + n % 2

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"attention impl 'reformer' shares queries and keys: needs as many "
                             f"queries as keys, got {q.shape[1]} and {k.shape[1]}")
        qh, vh = heads_first(q, v)
        n = qh.shape[2]
        buckets = lsh_buckets(qh, self.n_buckets(n), self.config.n_hashes)
        positions = torch.arange(n, device=q.device)
        order = (buckets * n + positions).argsort(dim=-1)              # (B, H, R, N)
        qs = sort_rounds(qh, order)
        out, lse = attend_in_chunks(
            qs, F.normalize(qs, dim=-1), sort_rounds(vh, order), order, order,
            key_validity(key_padding_mask, order), min(self.config.bucket_size, n),
            scale_of(softmax_scale, q.shape[-1]), look_back=True, causal=causal,
            dropout_p=dropout_p, self_score=SELF_SCORE)
        return unsort_and_combine(out, lse, order).transpose(1, 2).to(q.dtype)
