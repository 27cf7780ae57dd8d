"""Attention inside sorted buckets, shared by reformer and smyrf: each hashing round sorts queries
and keys by a hash, cuts the sorted sequences into chunks of `chunk` tokens and attends within a
chunk (Reformer also to the chunk before it); the rounds' outputs are unsorted and combined with
weights softmax(lse_r), lse_r the log of round r's softmax normalizer, which is exact attention
over the union of the keys each round saw (keys seen twice counted twice)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fa_train.attention.module import at_least_float32


def sort_rounds(x, order):
    """x (B, H, N, d) reordered per round: (B, H, R, N, d), row n of round r = x[order[r, n]]."""
    b, h, r, n = order.shape
    index = order[..., None].expand(b, h, r, n, x.shape[-1])
    return x[:, :, None].expand(b, h, r, *x.shape[-2:]).gather(3, index)


def key_validity(key_padding_mask, order):
    """(B, H, R, N) bool: the key at each sorted place is a real token."""
    if key_padding_mask is None:
        return torch.ones(order.shape, dtype=torch.bool, device=order.device)
    b, h, r, n = order.shape
    return key_padding_mask.to(torch.bool)[:, None, None].expand(b, h, r, n).gather(3, order)


def _chunks(x, chunk, fill):
    """(..., N, *) -> (..., N / chunk, chunk, *) after padding N with `fill` to a multiple."""
    pad = -x.shape[3] % chunk
    if pad:
        x = torch.cat([x, x.new_full((*x.shape[:3], pad, *x.shape[4:]), fill)], dim=3)
    return x.unflatten(3, (-1, chunk))


def _with_chunk_before(x):
    """Each chunk followed by the chunk before it (the first by the last): (..., nc, 2 c, *)."""
    return torch.cat([x, x.roll(1, dims=3)], dim=4)


def attend_in_chunks(q, k, v, q_pos, k_pos, k_valid, chunk, scale, *, look_back=False,
                     causal=False, dropout_p=0.0, self_score=None):
    """Softmax attention within chunks of sorted rounds.

    q, k, v: (B, H, R, N, d) sorted; q_pos, k_pos: (B, H, R, N) original positions; k_valid:
    (B, H, R, N) bool. look_back: a chunk also sees the chunk before it. causal: keys after the
    query are masked. self_score: the score of a query against its own position (Reformer: a token
    attends to itself only when it sees nothing else). Returns the output (B, H, R, N, d) and the
    log normalizers lse (B, H, R, N), about finfo.min where a query saw no valid key.
    """
    n = q.shape[3]
    q, v_, k = _chunks(q, chunk, 0.0), _chunks(v, chunk, 0.0), _chunks(k, chunk, 0.0)
    q_pos, k_pos = _chunks(q_pos, chunk, -1), _chunks(k_pos, chunk, -1)
    k_valid = _chunks(k_valid, chunk, False)
    if look_back and k.shape[3] > 1:
        k, v_, k_pos, k_valid = (_with_chunk_before(t) for t in (k, v_, k_pos, k_valid))
    scores = at_least_float32(q @ k.transpose(-2, -1)) * scale    # (B, H, R, nc, c, c')
    valid = k_valid[..., None, :].expand(scores.shape)
    if causal:
        valid = valid & (k_pos[..., None, :] <= q_pos[..., :, None])
    if self_score is not None:
        scores = scores.masked_fill(valid & (k_pos[..., None, :] == q_pos[..., :, None]),
                                    self_score)
    scores = scores.masked_fill(~valid, torch.finfo(scores.dtype).min)
    lse = scores.logsumexp(dim=-1)
    probs = (torch.exp(scores - lse[..., None]) * valid).to(v.dtype)  # no valid key: zeros
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    out = (probs @ v_).flatten(3, 4)[..., :n, :]
    return out, lse.flatten(3, 4)[..., :n]


def unsort_and_combine(out, lse, order):
    """Rounds (B, H, R, N, d) in sorted order -> (B, H, N, d): back to positions, weighted by
    softmax over rounds of their lse, in the output's dtype."""
    undo = order.argsort(dim=-1)
    out = out.gather(3, undo[..., None].expand(out.shape))
    weights = torch.softmax(lse.gather(3, undo), dim=2)
    return (weights[..., None] * out).sum(dim=2).to(out.dtype)
