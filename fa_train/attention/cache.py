"""Attention of new tokens against a preallocated KV cache, in PyTorch (the reference every
implementation's ``attend_cache`` matches; ``flash`` runs kernels.flash_attn_with_kvcache instead).

Layout: q, k, v (B, Nq, H, d) for the Nq new tokens, k_cache / v_cache (B, capacity, Hkv, d),
cache_seqlens (B,) int: how many tokens each row of the cache holds. The new k, v are written in
place at positions ``cache_seqlens[b] + j`` first; new token i then sees the row's first
``cache_seqlens[b]`` tokens and the new tokens j <= i (a chain), or, with ``tree_parents`` (Nq,)
(parent index < i, -1 for a root), itself and its ancestors (a token tree, as speculative decoding
verifies). With a sliding ``window_size`` (left, right) it sees only keys j with
p - left <= j <= p + right, p = cache_seqlens[b] + i its position (-1: unbounded), as the kernel
defines it. The caller advances ``cache_seqlens``.

While a CUDA graph is being captured nothing is read back to the host: the overflow check is
skipped (the caller bounds the request) and attention runs over the whole capacity under the
same mask, so one captured step serves every cache length.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def new_token_visibility(n_new: int, tree_parents: torch.Tensor | None, device) -> torch.Tensor:
    """(Nq, Nq) bool: new token i sees new token j (lower-triangular for a chain, ancestors and
    itself for a tree)."""
    if tree_parents is None:
        return torch.ones(n_new, n_new, dtype=torch.bool, device=device).tril()
    parents = tree_parents.tolist()
    if len(parents) != n_new or any(not -1 <= p < i for i, p in enumerate(parents)):
        raise ValueError(f"tree_parents must hold {n_new} parent indices, each -1 (a root) or "
                         f"smaller than its own index; got {parents}")
    sees = torch.eye(n_new, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            sees[i] |= sees[p]
    return sees.to(device)


def capturing_graph(x: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on the current stream of `x`'s device."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def attended_length(cache_seqlens, n_new: int, capacity: int) -> int:
    """Cache positions the new tokens attend to: the longest row's cached plus new tokens (one
    device sync), or the whole capacity while a CUDA graph is captured. An overflow is refused."""
    if capturing_graph(cache_seqlens):
        return capacity
    held = int(cache_seqlens.max())
    if held + n_new > capacity:
        raise ValueError(f"KV cache overflow: {held} cached + {n_new} new tokens exceed its "
                         f"capacity {capacity}")
    return held + n_new


def write_to_cache(k, v, k_cache, v_cache, cache_seqlens) -> None:
    """Store the new k, v (B, Nq, Hkv, d) at positions cache_seqlens[b] + j of each row (the
    caller has checked they fit: `attended_length`)."""
    n_new = k.shape[1]
    rows = torch.arange(k.shape[0], device=k.device)[:, None]
    cols = cache_seqlens.to(device=k.device, dtype=torch.long)[:, None] + \
        torch.arange(n_new, device=k.device)
    k_cache[rows, cols] = k.to(k_cache.dtype)
    v_cache[rows, cols] = v.to(v_cache.dtype)


def cache_keep_mask(cache_seqlens, n_new: int, length: int, tree_parents=None,
                    window_size=(-1, -1)) -> torch.Tensor:
    """(B, 1, Nq, length) bool: which of the first `length` cache positions each new token sees."""
    device = cache_seqlens.device
    held = cache_seqlens.to(torch.long)[:, None, None]                         # (B, 1, 1)
    key = torch.arange(length, device=device)[None, None, :]                   # (1, 1, L)
    distance = key - held - torch.arange(n_new, device=device)[None, :, None]  # key - query pos
    if tree_parents is None:
        keep = distance <= 0
    else:
        offset = key - held                                                    # new-token index
        sees = new_token_visibility(n_new, tree_parents, device)               # (Nq, Nq)
        new = sees[:, offset[:, 0].clamp(0, n_new - 1)].transpose(0, 1)        # (B, Nq, L)
        keep = (offset < 0) | (new & (offset < n_new))
    left, right = window_size
    if left >= 0:
        keep = keep & (distance >= -left)
    if right >= 0:
        keep = keep & (distance <= right)
    return keep[:, None]


def attend_cache_torch(q, k, v, k_cache, v_cache, cache_seqlens, softmax_scale=None,
                       tree_parents=None, window_size=(-1, -1)) -> torch.Tensor:
    """The module docstring's cache attention by torch's scaled_dot_product_attention with an
    explicit mask over the occupied part of the cache; returns (B, Nq, H, d)."""
    n_new = q.shape[1]
    length = attended_length(cache_seqlens, n_new, k_cache.shape[1])
    write_to_cache(k, v, k_cache, v_cache, cache_seqlens)
    keep = cache_keep_mask(cache_seqlens, n_new, length, tree_parents, window_size)
    kh, vh = (t[:, :length].transpose(1, 2) for t in (k_cache, v_cache))  # (B, Hkv, L, d)
    groups = q.shape[2] // kh.shape[1]
    if groups > 1:
        kh, vh = kh.repeat_interleave(groups, dim=1), vh.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), kh.to(q.dtype), vh.to(q.dtype),
                                         attn_mask=keep, scale=softmax_scale)
    return out.transpose(1, 2)
