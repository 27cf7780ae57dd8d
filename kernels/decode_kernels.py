"""Decode attention's device code (FlashDecoding): the split-KV kernel and the kernel
that merges its splits. kernels/decode.py launches them.

One program of `decode_kernel` takes one K/V head of one batch element, a block of rows of the
(query, head-in-group) pairs that share that K/V head, and one split (a range of key positions):
each K/V tile is read once for the whole GQA group. The call's new keys and values are read
from its own k, v tensors and copied into the cache by the same kernel (no append launch).
Rows are numbered r = query * GROUP + head-in-group. With one split the program writes the
output; with several it writes its normalized partial output and log-sum-exp (log2 units) for
`combine_splits_kernel`.

Key position j of batch b lives at row j of K[b] (a contiguous cache) or, with PAGED, at row
j % PAGE_SIZE of page TABLE[b, j // PAGE_SIZE]. Query i sits at position i + seqlen - n_q, where
seqlen is the attended length of its batch element; a key is visible to it when it is below
seqlen and passes the causal / window / tree masks (kernels/decode.py defines them).
"""
import triton
import triton.language as tl

__all__ = ["decode_kernel", "combine_splits_kernel"]


@triton.jit
def _key_slots(TABLE, b, cols, valid, page_size, PAGED: tl.constexpr):
    """(page, row in page) of the key positions `cols` of batch element b: its own cache row
    `cols` (page b) unless PAGED."""
    if PAGED:
        page = tl.load(TABLE + cols // page_size, mask=valid, other=0).to(tl.int64)
        slot = (cols % page_size).to(tl.int64)
    else:
        page = b.to(tl.int64)
        slot = cols.to(tl.int64)
    return page, slot


@triton.jit
def _visible(cols, pos, rows_q, n_q, tree_start, TREE, window_left, window_right,
             IS_CAUSAL: tl.constexpr, WINDOW: tl.constexpr, HAS_TREE: tl.constexpr):
    """Which keys `cols` each query (position `pos`, index `rows_q`) may see, bounds aside."""
    keep = (rows_q[:, None] >= 0) & (cols[None, :] >= 0)  # all true, at the full tile shape
    if IS_CAUSAL:
        keep = keep & (cols[None, :] <= pos[:, None])
    if WINDOW:
        if window_left >= 0:
            keep = keep & (cols[None, :] >= pos[:, None] - window_left)
        if window_right >= 0:
            keep = keep & (cols[None, :] <= pos[:, None] + window_right)
    if HAS_TREE:
        t = cols - tree_start  # index among the tree's tokens (< 0: an earlier cache entry)
        in_tree = (t[None, :] >= 0) & (rows_q[:, None] < n_q)
        anc = tl.load(TREE + rows_q[:, None] * n_q + t[None, :], mask=in_tree, other=0)
        keep = keep & ((t[None, :] < 0) | (anc != 0))
    return keep


@triton.jit
def _softmax_step(acc, l_i, m_i, q, k, v, keep, qk_scale):
    """One key tile of the online softmax (log2 units): update the running max, sum, output."""
    qk = tl.where(keep, tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows seeing no key yet
    p = tl.math.exp2(qk - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def decode_kernel(Q, K, V, K_NEW, V_NEW, O, O_PART, LSE_PART, CACHE_SEQLENS, TABLE, TREE,
                  stride_qb, stride_qn, stride_qh,
                  stride_kp, stride_kr, stride_kh, stride_vp, stride_vr, stride_vh,
                  stride_knb, stride_knn, stride_knh, stride_vnb, stride_vnn, stride_vnh,
                  stride_ob, stride_on, stride_oh, stride_table,
                  n_q, n_new, cache_len, heads_kv, n_rows, page_size,
                  window_left, window_right, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, GROUP: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
                  WINDOW: tl.constexpr, HAS_TREE: tl.constexpr, PAGED: tl.constexpr,
                  APPEND: tl.constexpr, SPLIT: tl.constexpr):
    """Grid (splits, row blocks, batch * heads_kv). Batch element b holds CACHE_SEQLENS[b]
    tokens (cache_len for all when CACHE_SEQLENS is None) and attends those plus its n_new new
    ones. With APPEND the new keys and values are read from K_NEW, V_NEW (B, n_new, Hkv, d), and
    the programs of row block 0 copy them into the cache, each split its own positions: a cache
    slot that is read is never written. O_PART (splits, B, n_q, Hq, d) and LSE_PART (splits, B,
    n_q, Hq) are float32 and contiguous, n_rows = B * n_q * Hq (used with SPLIT)."""
    split = tl.program_id(0)
    bh = tl.program_id(2)
    b = bh // heads_kv
    h_kv = bh % heads_kv
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_q = rows // GROUP
    heads = h_kv * GROUP + rows % GROUP
    row_ok = rows_q < n_q
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)

    if CACHE_SEQLENS is not None:
        cache_len = tl.load(CACHE_SEQLENS + b)
    seqlen = cache_len + n_new
    tree_start = seqlen - n_q  # position of query 0 (and of the first tree token)
    pos = rows_q + tree_start
    # the splits cut this sequence's keys into equal whole tiles (the last ones may be empty)
    keys_per_split = tl.cdiv(tl.cdiv(seqlen, tl.num_programs(0)), BLOCK_N) * BLOCK_N
    split_lo = split * keys_per_split
    split_hi = tl.minimum(split_lo + keys_per_split, seqlen)
    lo, hi = split_lo, split_hi
    # skip keys no row of this block can see
    first_pos = tl.program_id(1) * BLOCK_M // GROUP + tree_start
    last_pos = tl.minimum((tl.program_id(1) * BLOCK_M + BLOCK_M - 1) // GROUP, n_q - 1) + tree_start
    if IS_CAUSAL:
        hi = tl.minimum(hi, last_pos + 1)
    if WINDOW:
        if window_right >= 0:
            hi = tl.minimum(hi, last_pos + window_right + 1)
        if window_left >= 0:
            lo = tl.maximum(lo, first_pos - window_left)

    q_ptrs = (Q + b.to(tl.int64) * stride_qb + rows_q[:, None] * stride_qn
              + heads[:, None] * stride_qh + offs_d[None, :])
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if PAGED:
        TABLE += b.to(tl.int64) * stride_table
    K += h_kv.to(tl.int64) * stride_kh
    V += h_kv.to(tl.int64) * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    cached_hi = tl.minimum(hi, cache_len)
    for start in tl.range(lo, cached_hi, BLOCK_N):  # keys already in the cache
        cols = start + offs_n
        col_ok = cols < cached_hi
        page, slot = _key_slots(TABLE, b, cols, col_ok, page_size, PAGED)
        kv_mask = col_ok[:, None] & d_ok[None, :]
        k = tl.load(K + (page * stride_kp + slot * stride_kr)[:, None] + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        v = tl.load(V + (page * stride_vp + slot * stride_vr)[:, None] + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        keep = col_ok[None, :] & _visible(cols, pos, rows_q, n_q, tree_start, TREE, window_left,
                                          window_right, IS_CAUSAL, WINDOW, HAS_TREE)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, k, v, keep, qk_scale)
    if APPEND:
        K_NEW += b.to(tl.int64) * stride_knb + h_kv.to(tl.int64) * stride_knh
        V_NEW += b.to(tl.int64) * stride_vnb + h_kv.to(tl.int64) * stride_vnh
        for start in tl.range(tl.maximum(lo, cache_len), hi, BLOCK_N):  # this call's keys
            cols = start + offs_n
            col_ok = cols < hi
            t = (cols - cache_len)[:, None]
            kv_mask = col_ok[:, None] & d_ok[None, :]
            k = tl.load(K_NEW + t * stride_knn + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V_NEW + t * stride_vnn + offs_d[None, :], mask=kv_mask, other=0.0)
            keep = col_ok[None, :] & _visible(cols, pos, rows_q, n_q, tree_start, TREE,
                                              window_left, window_right, IS_CAUSAL, WINDOW,
                                              HAS_TREE)
            acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, k, v, keep, qk_scale)
        if tl.program_id(1) == 0:  # copy this split's new tokens into the cache
            for start in range(tl.maximum(split_lo, cache_len), split_hi, BLOCK_N):
                cols = start + offs_n
                col_ok = cols < split_hi
                t = (cols - cache_len)[:, None]
                kv_mask = col_ok[:, None] & d_ok[None, :]
                page, slot = _key_slots(TABLE, b, cols, col_ok, page_size, PAGED)
                k = tl.load(K_NEW + t * stride_knn + offs_d[None, :], mask=kv_mask)
                v = tl.load(V_NEW + t * stride_vnn + offs_d[None, :], mask=kv_mask)
                tl.store(K + (page * stride_kp + slot * stride_kr)[:, None] + offs_d[None, :],
                         k, mask=kv_mask)
                tl.store(V + (page * stride_vp + slot * stride_vr)[:, None] + offs_d[None, :],
                         v, mask=kv_mask)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows that saw no key give zeros, lse -inf
    out = acc / l_safe[:, None]
    out_mask = row_ok[:, None] & d_ok[None, :]
    if SPLIT:
        flat = (b * n_q + rows_q) * (heads_kv * GROUP) + heads
        part = split.to(tl.int64) * n_rows + flat
        tl.store(O_PART + part[:, None] * HEAD_DIM + offs_d[None, :], out, mask=out_mask)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(LSE_PART + part, lse, mask=row_ok)
    else:
        o_ptrs = (O + b.to(tl.int64) * stride_ob + rows_q[:, None] * stride_on
                  + heads[:, None] * stride_oh + offs_d[None, :])
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=out_mask)


@triton.jit
def combine_splits_kernel(O_PART, LSE_PART, O, n_splits, n_rows,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    """Grid (n_rows,): row r of the contiguous output O (B * n_q * Hq rows of HEAD_DIM) from its
    splits' partial outputs, weighted by 2^(lse - max lse). A row no split saw gives zeros."""
    r = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    m = tl.max(tl.full([BLOCK_S], float("-inf"), tl.float32), 0)
    for s0 in range(0, n_splits, BLOCK_S):
        s = s0 + offs_s
        lse = tl.load(LSE_PART + s * n_rows + r, mask=s < n_splits, other=float("-inf"))
        m = tl.maximum(m, tl.max(lse, 0))
    m = tl.where(m == float("-inf"), 0.0, m)
    acc = tl.zeros([BLOCK_D], tl.float32)
    total = tl.zeros([BLOCK_S], tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        s = s0 + offs_s
        s_ok = s < n_splits
        w = tl.math.exp2(tl.load(LSE_PART + s * n_rows + r, mask=s_ok, other=float("-inf")) - m)
        o = tl.load(O_PART + (s[:, None] * n_rows + r) * HEAD_DIM + offs_d[None, :],
                    mask=s_ok[:, None] & d_ok[None, :], other=0.0)
        acc += tl.sum(w[:, None] * o, 0)
        total += w
    denom = tl.sum(total, 0)
    out = acc / tl.where(denom == 0.0, 1.0, denom)
    tl.store(O + r * HEAD_DIM + offs_d, out.to(O.dtype.element_ty), mask=d_ok)
