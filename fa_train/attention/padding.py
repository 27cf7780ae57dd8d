"""Padding helpers: packed variable-length batches <-> padded (B, N, ...) ones, and the boolean
keep-mask of causal and key-padding masking for the materialized implementations."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def unpad_input(x: torch.Tensor, key_padding_mask: torch.Tensor):
    """(B, N, ...) + (B, N) bool mask -> (total, ...), indices, cu_seqlens (int32), max_seqlen."""
    mask = key_padding_mask.to(torch.bool)
    seqlens = mask.sum(dim=1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    flat = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return flat.index_select(0, indices), indices, cu_seqlens, max_seqlen


def pad_input(x: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of :func:`unpad_input`: (total, ...) -> (B, N, ...) with zeros at padding."""
    out = x.new_zeros(batch * seqlen, *x.shape[1:])
    out.index_copy_(0, indices, x)
    return out.view(batch, seqlen, *x.shape[1:])


def varlen_to_padded(cu_seqlens: torch.Tensor, max_seqlen: int, device):
    """Indices of packed tokens inside a (B, max_seqlen) grid, the matching key-padding mask and
    the batch size."""
    seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.long)
    pos = torch.arange(max_seqlen, device=device)
    mask = pos[None, :] < seqlens[:, None]
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    return mask, indices, seqlens.numel()


def run_varlen_by_padding(fn, q, k, v, cu_seqlens, max_seqlen, **kwargs):
    """`fn` (a padded implementation) over packed q, k, v: pad, attend with a key-padding mask,
    unpad the output again."""
    n = int(max_seqlen)
    mask, indices, batch = varlen_to_padded(cu_seqlens, n, q.device)
    qp, kp, vp = (pad_input(t, indices, batch, n) for t in (q, k, v))
    out = fn(qp, kp, vp, key_padding_mask=mask, **kwargs)
    return out.reshape(batch * n, *out.shape[2:]).index_select(0, indices)


def keep_mask(q, k, causal, key_padding_mask, window=(-1, -1)):
    """Boolean keep-mask broadcastable to (B, H, Nq, Nk), or None. Causal is bottom-right aligned,
    as is window (left, right): query i keeps keys i + Nk - Nq - left .. i + Nk - Nq + right
    (-1 = unbounded on that side)."""
    nq, nk = q.shape[1], k.shape[1]
    keep = None
    left, right = window
    if causal:
        right = 0
    if left >= 0 or right >= 0:
        diagonal = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        cols = torch.arange(nk, device=q.device)[None, :]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep = keep & (cols >= diagonal - left)
        if right >= 0:
            keep = keep & (cols <= diagonal + right)
        keep = keep[None, None]
    if key_padding_mask is not None:
        kpm = key_padding_mask.to(torch.bool)[:, None, None, :]
        keep = kpm if keep is None else keep & kpm
    return keep
