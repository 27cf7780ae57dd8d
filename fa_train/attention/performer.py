"""performer: FAVOR+ (Choromanski et al., 2021, "Rethinking Attention with Performers"):
exp(q . k * scale) is estimated without bias by positive random features
phi(x) = exp(w_r . x - |x|^2 / 2) / sqrt(m) over m = `nb_features` orthogonal Gaussian directions
w_r (rows of blocks of a QR-orthogonalized Gaussian matrix, rescaled to chi-distributed norms), and
attention becomes the kernelized form of `linear` (causal: prefix sums). The estimate approaches
softmax attention as m grows.

The directions are drawn at the first call and redrawn every `redraw_interval` calls made in
training mode (0: never); they are not saved with a checkpoint (a resumed run draws fresh ones).
Every layer's call counts: a model of L layers makes L calls per step. Under activation
checkpointing the recomputed calls count too, and a redraw between a layer's call and its
recomputation would change its features within a step: use redraw_interval 0 there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from fa_train.attention.linear import kernelized_attention, zero_padded_keys
from fa_train.attention.module import ModuleAttention, check_int_options, heads_first, scale_of


def orthogonal_gaussian(m, d, generator=None):
    """(m, d) random directions: d x d blocks with orthonormal rows (QR of a Gaussian matrix),
    rows scaled by the norms of independent Gaussian vectors (so each row is marginally
    N(0, I_d), as positive random features need)."""
    blocks = []
    for _ in range(-(-m // d)):
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator))
        blocks.append(q.T)
    norms = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)
    return torch.cat(blocks)[:m] * norms


def positive_features(x, w, is_query):
    """phi(x) = exp(w . x - |x|^2 / 2 - c) / sqrt(m), (B, H, N, m); the stabilizer c (the row max
    for queries, the max over all keys of a head for keys) cancels in the normalization."""
    proj = x @ w.T
    logits = proj - x.pow(2).sum(dim=-1, keepdim=True) / 2
    dims = (-1,) if is_query else (-2, -1)
    stabilizer = logits.detach().amax(dim=dims, keepdim=True)
    return torch.exp(logits - stabilizer) / math.sqrt(w.shape[0])


@dataclass(frozen=True)
class PerformerConfig:
    nb_features: Optional[int] = None   # random features m; None: round(d * ln d)
    redraw_interval: int = 1000         # training calls between redraws; 0: never
    chunk_size: int = 64                # causal form: tokens per chunk of the prefix sums

    def __post_init__(self):
        check_int_options(self, nb_features=(1, None), redraw_interval=0, chunk_size=1)


class PerformerAttention(ModuleAttention):
    name = "performer"
    supports = frozenset({"causal", "key_padding_mask", "varlen"})
    Config = PerformerConfig

    def __init__(self, config: PerformerConfig | None = None):
        super().__init__(config)
        self.register_buffer("features", torch.empty(0, 0), persistent=False)
        self.calls = 0

    def n_features(self, head_dim):
        """m for heads of `head_dim`: the config's, or round(d ln d) (at least 1)."""
        return self.config.nb_features or max(1, round(head_dim * math.log(head_dim)))

    def redraw(self, head_dim, device):
        """Fresh directions (m, head_dim) from torch's global generator."""
        self.features = orthogonal_gaussian(self.n_features(head_dim), head_dim).to(device)

    def _directions(self, head_dim, device):
        interval = self.config.redraw_interval
        stale = self.features.shape[1] != head_dim or self.features.device != device
        due = self.training and interval > 0 and self.calls > 0 and self.calls % interval == 0
        if stale or due:
            self.redraw(head_dim, device)
        if self.training:
            self.calls += 1
        return self.features

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        qh, kh, vh = heads_first(q, k, v, upcast=True)  # sums over the sequence in float32
        root = math.sqrt(scale_of(softmax_scale, q.shape[-1]))  # (r q).(r k) = q.k * scale
        w = self._directions(q.shape[-1], q.device).to(qh.dtype)
        phi_q = positive_features(qh * root, w, is_query=True)
        phi_k = zero_padded_keys(positive_features(kh * root, w, is_query=False), key_padding_mask)
        out = kernelized_attention(phi_q, phi_k, vh, causal, self.config.chunk_size)
        return out.transpose(1, 2).to(q.dtype)
