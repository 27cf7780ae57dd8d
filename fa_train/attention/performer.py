"""performer: FAVOR+ (Choromanski et al., 2021, "Rethinking Attention with Performers"):
exp(q . k * scale) is estimated by positive random features
phi(x) = (exp(w_r . x - |x|^2 / 2 - c) + eps) / sqrt(m) over m = `nb_features` orthogonal Gaussian
directions w_r (rows of blocks of a QR-orthogonalized Gaussian matrix, rescaled to chi-distributed
norms), and attention becomes the kernelized form of `linear` (causal: prefix sums). With
eps = `feature_eps` = 0 the estimate is unbiased and approaches softmax attention as m grows;
eps > 0 (as in the reference implementations) biases it slightly towards uniform attention but
keeps the normalizer phi(q) . sum phi(k) >= eps^2 per key where exp underflows (queries and keys
that barely overlap), instead of ~0, where the backward of num / den overflowed to inf and NaN.

The directions are drawn at the first call and redrawn every `redraw_interval` optimizer steps
(0: never), at the start of a step: the training task calls `start_train_step` on every module
that has it, so all layers (which share one attention module) change features together and never
within a step, also under activation checkpointing or torch.compile. Called outside a training
task the module never redraws. The directions are not saved with a checkpoint (a resumed run draws
fresh ones).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from fa_train.attention.linear import kernelized_attention, zero_padded_keys
from fa_train.attention.module import ModuleAttention, check_int_options, heads_first, scale_of
from fa_train.errors import check_float


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


def positive_features(x, w, is_query, eps=0.0):
    """phi(x) = (exp(w . x - |x|^2 / 2 - c) + eps) / sqrt(m), (B, H, N, m); the stabilizer c (the
    row max for queries, the max over all keys of a head for keys) cancels in the normalization
    when eps is 0, and otherwise makes eps relative to the largest feature."""
    proj = x @ w.T
    logits = proj - x.pow(2).sum(dim=-1, keepdim=True) / 2
    dims = (-1,) if is_query else (-2, -1)
    stabilizer = logits.detach().amax(dim=dims, keepdim=True)
    return (torch.exp(logits - stabilizer) + eps) / math.sqrt(w.shape[0])


@dataclass(frozen=True)
class PerformerConfig:
    nb_features: Optional[int] = None   # random features m; None: round(d * ln d)
    redraw_interval: int = 1000         # optimizer steps between redraws; 0: never
    chunk_size: int = 64                # causal form: tokens per chunk of the prefix sums
    # added to every exp feature: bounds the normalizer away from 0 (finite gradients where
    # queries and keys barely overlap) at a small bias; 1e-4 as softmax_kernel's eps in
    # lucidrains/performer-pytorch (Google's JAX original adds its numerical_stabilizer, 1e-6)
    feature_eps: float = 1e-4

    def __post_init__(self):
        check_int_options(self, nb_features=(1, None), redraw_interval=0, chunk_size=1)
        eps = check_float("attention.feature_eps", self.feature_eps, 0.0, high_open=True)
        object.__setattr__(self, "feature_eps", eps)  # a float, even if given as a string


class PerformerAttention(ModuleAttention):
    name = "performer"
    supports = frozenset({"causal", "key_padding_mask", "varlen"})
    Config = PerformerConfig

    def __init__(self, config: PerformerConfig | None = None):
        super().__init__(config)
        self.register_buffer("features", torch.empty(0, 0), persistent=False)
        self.drawn_for = 0   # the redraw period (step // redraw_interval) of the features held

    def n_features(self, head_dim):
        """m for heads of `head_dim`: the config's, or round(d ln d) (at least 1)."""
        return self.config.nb_features or max(1, round(head_dim * math.log(head_dim)))

    def redraw(self, head_dim, device):
        """Fresh directions (m, head_dim) from torch's global generator."""
        self.features = orthogonal_gaussian(self.n_features(head_dim), head_dim).to(device)

    def start_train_step(self, step: int):
        """Redraw the directions when optimizer step `step` opens a new redraw period."""
        interval = self.config.redraw_interval
        if interval <= 0:
            return
        if step // interval != self.drawn_for and self.features.numel():
            self.redraw(self.features.shape[1], self.features.device)
        self.drawn_for = step // interval

    def _directions(self, head_dim, device):
        if self.features.shape[1] != head_dim or self.features.device != device:
            self.redraw(head_dim, device)
        return self.features

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        qh, kh, vh = heads_first(q, k, v, upcast=True)  # sums over the sequence in float32
        root = math.sqrt(scale_of(softmax_scale, q.shape[-1]))  # (r q).(r k) = q.k * scale
        w = self._directions(q.shape[-1], q.device).to(qh.dtype)
        eps = self.config.feature_eps
        phi_q = positive_features(qh * root, w, is_query=True, eps=eps)
        phi_k = zero_padded_keys(positive_features(kh * root, w, is_query=False, eps=eps),
                                 key_padding_mask)
        out = kernelized_attention(phi_q, phi_k, vh, causal, self.config.chunk_size)
        return out.transpose(1, 2).to(q.dtype)
