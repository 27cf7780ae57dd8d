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
