"""Materialized attention in any dtype: the ground truth every kernel is tested against."""
import math

import torch


def reference_attention(q, k, v, softmax_scale=None, causal=False, key_padding_mask=None,
                        attn_mask=None, dropout_mask=None, dropout_p=0.0, upcast=True,
                        window_size=(-1, -1)):
    """Attention computed the textbook way, (batch, seqlen, heads, head_dim) layout.

    q: (B, Nq, Hq, d); k, v: (B, Nk, Hkv, d) with Hq % Hkv == 0 (GQA).
    causal: query i sees keys j <= i + Nk - Nq (bottom-right aligned, as flash-attn).
    window_size (left, right): query i sees keys i + Nk - Nq - left <= j <= i + Nk - Nq + right
    (-1 = unbounded on that side).
    key_padding_mask: (B, Nk) bool, True = keep. attn_mask: (B or 1, H or 1, Nq, Nk) bool, True = keep.
    dropout_mask: (B, Hq, Nq, Nk) bool, True = keep; kept probabilities are scaled by 1/(1-dropout_p).
    Rows with no visible key give zeros. Returns (out, lse) with lse (B, Hq, Nq) in float32 or q's
    dtype when that is float64; masked-out rows have lse = -inf.
    """
    out_dtype = q.dtype
    if upcast and q.dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    b, nq, hq, d = q.shape
    nk, hkv = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError(f"q heads ({hq}) must be a multiple of k/v heads ({hkv})")
    if hkv != hq:
        k = k.repeat_interleave(hq // hkv, dim=2)
        v = v.repeat_interleave(hq // hkv, dim=2)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    keep = torch.ones(b, hq, nq, nk, dtype=torch.bool, device=q.device)
    if causal:
        rows = torch.arange(nq, device=q.device)[:, None]
        cols = torch.arange(nk, device=q.device)[None, :]
        keep = keep & (cols <= rows + (nk - nq))
    left, right = window_size
    if left >= 0 or right >= 0:
        rows = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        cols = torch.arange(nk, device=q.device)[None, :]
        if left >= 0:
            keep = keep & (cols >= rows - left)
        if right >= 0:
            keep = keep & (cols <= rows + right)
    if key_padding_mask is not None:
        keep = keep & key_padding_mask[:, None, None, :].to(torch.bool)
    if attn_mask is not None:
        keep = keep & attn_mask.to(torch.bool)
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].masked_fill(torch.isinf(lse)[..., None], 0.0))
    probs = probs.masked_fill(~keep, 0.0)
    if dropout_mask is not None:
        probs = probs * dropout_mask.to(probs.dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
    return out.to(out_dtype), lse


def reference_attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     block_table=None, tree_parents=None):
    """Float64 ground truth of `kernels.flash_attn_with_kvcache` (same arguments, its docstring
    defines them); returns out (B, Nq, Hq, d) in float64 and leaves the caches unchanged.

    Built independently of the kernel's host code: each batch element's keys are gathered page by
    page, the new k/v appended, and the mask spelled out per query with `reference_attention`.
    """
    batch, n_q = q.shape[0], q.shape[1]
    n_new = 0 if k is None else k.shape[1]
    left, right = window_size
    outs = []
    for b in range(batch):
        if block_table is None:
            keys, values = k_cache[b], v_cache[b]
        else:
            keys = torch.cat([k_cache[int(p)] for p in block_table[b]])
            values = torch.cat([v_cache[int(p)] for p in block_table[b]])
        if cache_seqlens is None:
            cached = keys.shape[0]
        else:
            cached = int(cache_seqlens if isinstance(cache_seqlens, int) else cache_seqlens[b])
        keys, values = keys[:cached], values[:cached]
        if n_new:
            keys, values = torch.cat([keys, k[b]]), torch.cat([values, v[b]])
        n_k = keys.shape[0]
        keep = torch.ones(n_q, n_k, dtype=torch.bool)
        for i in range(n_q):
            pos = i + n_k - n_q  # the query's own position among the keys
            node, ancestors = i, set()  # tree tokens i sees: itself and its ancestors
            while tree_parents is not None and node >= 0:
                ancestors.add(node)
                node = int(tree_parents[node])
            for j in range(n_k):
                visible = not (causal and j > pos)
                visible &= left < 0 or j >= pos - left
                visible &= right < 0 or j <= pos + right
                if tree_parents is not None and j >= n_k - n_q:
                    visible &= (j - (n_k - n_q)) in ancestors
                keep[i, j] = visible
        out, _ = reference_attention(q[b:b + 1].double(), keys[None].double(),
                                     values[None].double(), softmax_scale=softmax_scale,
                                     attn_mask=keep[None, None].to(q.device))
        outs.append(out)
    return torch.cat(outs)
