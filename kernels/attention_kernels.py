"""FlashAttention's device code (paper Alg. 2 and 4): the Triton kernels, read top-down.

Shared helpers (dropout, masks, where a program works, how it loads rows), then the forward kernel
with its per-block step, then the backward: row statistics, the dK/dV kernel (which may also add
dQ with atomics) and the dQ kernel, each after its per-block step; last the dropout-mask kernel
for tests. kernels/attention_launch.py launches them.

Tensors use the flash-attn layout (batch, seqlen, heads, head_dim); packed variable-length
batches use (total_tokens, heads, head_dim) with cumulative sequence offsets. With SPARSE set, a
query block visits only the key blocks listed for it in a CSR index (and a key block only its
listed query blocks): the block-sparse variant (kernels/blocksparse.py). With WINDOW set (a
sliding window of keys each side of the diagonal), a query block visits only the key tiles its
rows can see, and a key block only the query tiles that see it: cost linear in N.

Conventions: scores are kept in the log2 domain (`qk_scale` = softmax_scale * log2(e)), so
softmax uses exp2; the log-sum-exp saved for the backward pass is in natural log units. Rows that
see no key produce zeros, lse = -inf, and zero gradients.
"""
import triton
import triton.language as tl

__all__ = ["fwd_kernel", "bwd_row_stats_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel",
           "dropout_mask_kernel"]


# --------------------------------------------------------------------------------------------
# Shared device helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def _dropout_args(SEED, dropout_p, DROPOUT: tl.constexpr):
    """(seed, dropout_p as fp32). The seed lives in device memory: no host sync, so the launch can
    be captured in CUDA graphs. Compiled graphs may pass Python floats as fp64."""
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
    return seed, tl.cast(dropout_p, tl.float32)


@triton.jit
def _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """Keep-mask (BLOCK_M queries from start_m x BLOCK_N keys from start_n) of head `bh`: Philox,
    regenerated, never stored.

    One Philox4x32-7 call (the fewest rounds its authors found crush-resistant) gives four 32-bit
    words, split into eight 16-bit uniforms; a pair is dropped when its uniform is below
    round(dropout_p * 2^16), so the drop probability is exact to 1/65536. A call serves the eight
    (query, key) pairs q + {0, 8} x k + {0, 1, 8, 9} (q % 16 < 8, k % 16 < 8, k even): the pairs
    one thread holds of a tensor-core accumulator tile, so the uniforms need no exchange between
    threads. Tiles start at multiples of 16.
    """
    # query = 16a + 8b + c, key = 16x + 8y + 2z + e; one call per (a, c, x, z), its word 2b + y
    # and half e
    calls_q = (start_m // 16 + tl.arange(0, BLOCK_M // 16))[:, None] * 8 + tl.arange(0, 8)[None, :]
    calls_k = (start_n // 16 + tl.arange(0, BLOCK_N // 16))[:, None] * 4 + tl.arange(0, 4)[None, :]
    width = ((seqlen_k + 15) // 16 * 4).to(tl.uint32)
    counters = (calls_q.to(tl.uint32)[:, :, None, None] * width
                + calls_k.to(tl.uint32)[None, None, :, :])
    r0, r1, r2, r3 = tl.randint4x(seed + bh, counters, 7)
    words = tl.join(tl.join(r0, r1), tl.join(r2, r3)).to(tl.uint32, bitcast=True)  # (a c x z y b)
    uniforms = tl.join(words & 0xFFFF, words >> 16)  # (a c x z y b e)
    if TRANSPOSED:
        uniforms = tl.reshape(tl.permute(uniforms, (2, 4, 3, 6, 0, 5, 1)), (BLOCK_N, BLOCK_M))
    else:
        uniforms = tl.reshape(tl.permute(uniforms, (0, 5, 1, 2, 4, 3, 6)), (BLOCK_M, BLOCK_N))
    threshold = tl.cast(dropout_p * 65536.0 + 0.5, tl.uint32)
    return uniforms >= threshold


@triton.jit
def _score_mask(qk, rows, cols, seqlen_k, diag, kpm_ptr, window,
                IS_CAUSAL: tl.constexpr, MASK_BOUNDS: tl.constexpr, HAS_KPM: tl.constexpr,
                WINDOW: tl.constexpr):
    """Set to -inf the scores of keys a query may not see: bounds, causal diagonal, sliding
    window (query i sees keys i + diag - window[0] .. i + diag + window[1]), padding."""
    if MASK_BOUNDS:
        valid = cols < seqlen_k
        if IS_CAUSAL:
            valid = valid & (cols <= rows + diag)
        if WINDOW:
            valid = valid & (cols >= rows + (diag - window[0]))
            valid = valid & (cols <= rows + (diag + window[1]))
        qk = tl.where(valid, qk, float("-inf"))
    if HAS_KPM:
        keep = tl.load(kpm_ptr + cols, mask=cols < seqlen_k, other=0)
        qk = tl.where(keep != 0, qk, float("-inf"))
    return qk


@triton.jit
def _seq_bounds(CU, b, seqlen, VARLEN: tl.constexpr):
    """Start offset and length of sequence b (packed when VARLEN, else fixed length)."""
    if VARLEN:
        start = tl.load(CU + b)
        return start, tl.load(CU + b + 1) - start
    return 0, seqlen


@triton.jit
def _query_block(CU_Q, CU_K, seqlen_q, seqlen_k, n_heads, BLOCK_M: tl.constexpr,
                 VARLEN: tl.constexpr, REVERSE: tl.constexpr):
    """Where this program works, for kernels over query blocks (grid: query blocks x batch*heads):
    (bh, b, h, q_start, seqlen_q, k_start, seqlen_k, start_m). REVERSE (causal) takes the longest
    rows first, for a better tail."""
    pid_m = tl.program_id(0)
    if REVERSE:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // n_heads
    q_start, seqlen_q = _seq_bounds(CU_Q, b, seqlen_q, VARLEN)
    k_start, seqlen_k = _seq_bounds(CU_K, b, seqlen_k, VARLEN)
    return bh, b, bh % n_heads, q_start, seqlen_q, k_start, seqlen_k, pid_m * BLOCK_M


@triton.jit
def _causal_key_ranges(start_m, seqlen_k, diag,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """Key range of a query block: [0, full) needs no mask, [full, hi) needs one."""
    hi = seqlen_k
    full = seqlen_k // BLOCK_N * BLOCK_N
    if IS_CAUSAL:
        hi = tl.maximum(tl.minimum(seqlen_k, start_m + BLOCK_M + diag), 0)
        full = tl.minimum(full, tl.maximum(start_m + diag + 1, 0) // BLOCK_N * BLOCK_N)
    return full, hi


@triton.jit
def _window_key_ranges(start_m, seqlen_k, diag, window,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key ranges of a query block under a sliding window: [lo, full_lo) and [full_hi, hi) need
    a mask, [full_lo, full_hi) (the tiles every row of the block sees whole) none. Keys outside
    [lo, hi) are never visited."""
    first = start_m + diag - window[0]  # the first key of the block's first row
    lo = tl.maximum(first, 0) // BLOCK_N * BLOCK_N
    hi = tl.maximum(tl.minimum(seqlen_k, start_m + BLOCK_M + diag + window[1]), 0)
    full_lo = tl.minimum(tl.cdiv(tl.maximum(first + BLOCK_M - 1, 0), BLOCK_N) * BLOCK_N, hi)
    full_hi = tl.maximum(tl.minimum(seqlen_k, start_m + diag + window[1] + 1), 0)
    return lo, full_lo, tl.maximum(full_hi // BLOCK_N * BLOCK_N, full_lo), hi


@triton.jit
def _window_query_ranges(start_n, seqlen_q, seqlen_k, diag, window,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Query ranges of a key block under a sliding window: [lo, mid) and [end, hi) need a mask,
    [mid, end) (the tiles that see every key of the block) none; a partial key block masks all.
    Queries outside [lo, hi) are never visited."""
    first = start_n - diag - window[1]  # the first query that sees the block's first key
    lo = tl.maximum(first, 0) // BLOCK_M * BLOCK_M
    hi = tl.maximum(tl.minimum(seqlen_q, start_n + BLOCK_N - diag + window[0]), 0)
    mid = tl.minimum(tl.cdiv(tl.maximum(first + BLOCK_N - 1, 0), BLOCK_M) * BLOCK_M, hi)
    end = tl.maximum(tl.minimum(seqlen_q, start_n - diag + window[0] + 1), 0) // BLOCK_M * BLOCK_M
    end = tl.maximum(end, mid)
    if start_n + BLOCK_N > seqlen_k:
        end = mid
    return lo, mid, end, hi


@triton.jit
def _tile_walk(PTR, SPLIT, LIST, start, LAYOUT_BLOCK: tl.constexpr, TILE: tl.constexpr,
               MASKED: tl.constexpr):
    """Tiles [t_lo, t_hi) of the CSR row of the layout block holding `start`: the listed blocks
    needing no mask, or with MASKED those needing one; and the block of the first tile."""
    SUB: tl.constexpr = LAYOUT_BLOCK // TILE
    i = start // LAYOUT_BLOCK
    if MASKED:
        t_lo, t_hi = tl.load(SPLIT + i) * SUB, tl.load(PTR + i + 1) * SUB
    else:
        t_lo, t_hi = tl.load(PTR + i) * SUB, tl.load(SPLIT + i) * SUB
    return t_lo, t_hi, tl.load(LIST + t_lo // SUB, mask=t_lo < t_hi, other=0)


@triton.jit
def _listed_tile(LIST, blk, t, t_hi, LAYOUT_BLOCK: tl.constexpr, TILE: tl.constexpr):
    """Start of tile t, which lies in layout block `blk`, and the block of tile t + 1 (0 from t_hi
    on). Reading each index one tile ahead keeps a tile's loads from waiting on it, so the
    pipeliner prefetches them as in the dense loops (kernels/NOTES.md, round 13)."""
    SUB: tl.constexpr = LAYOUT_BLOCK // TILE
    nxt = tl.load(LIST + (t + 1) // SUB, mask=t + 1 < t_hi, other=0)
    return blk * LAYOUT_BLOCK + t % SUB * TILE, nxt


@triton.jit
def _row_source(base, stride, n_rows, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                BLOCK_D: tl.constexpr, TMA: tl.constexpr, desc, b, h):
    """What a loop reads blocks of one head's rows from (TMA as in `tuning.TMA_MODES`): `base`
    itself (0); a tensor descriptor over its n_rows x HEAD_DIM elements, made by this program (1);
    or the launcher's (batch, seq, heads, d) descriptor `desc` with this program's batch b and
    head h (2). Descriptors load through the copy engine, zeros outside."""
    src = base
    if TMA == 2:
        src = (desc, b, h)
    elif TMA == 1:
        src = tl.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride, 1],
                                        [BLOCK_ROWS, BLOCK_D])
    return src


@triton.jit
def _load_rows(src, start, offs, offs_d, stride, n_rows, HEAD_DIM: tl.constexpr,
               MASKED: tl.constexpr, TMA: tl.constexpr):
    """Rows [start, start + len(offs)) of a `_row_source`, zeros past n_rows (checked only when
    MASKED) and past HEAD_DIM."""
    if TMA == 2:
        x = src[0].load([src[1], start, src[2], 0]).reshape(offs.shape[0], offs_d.shape[0])
    elif TMA == 1:
        x = src.load([start, 0])
    else:
        rows = start + offs
        mask = (offs_d < HEAD_DIM)[None, :]
        if MASKED:
            mask = mask & (rows[:, None] < n_rows)
        x = tl.load(src + rows[:, None] * stride + offs_d[None, :], mask=mask, other=0.0)
    return x


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit
def _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, start_n, start_m,
               offs_m, offs_n, offs_d, seqlen_k, diag, window, qk_scale, kpm_ptr,
               seed, bh, dropout_p,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr,
               TMA: tl.constexpr, WINDOW: tl.constexpr):
    """One key block of the online softmax: update the running max, sum and output."""
    cols = start_n + offs_n
    k = _load_rows(k_src, start_n, offs_n, offs_d, stride_kn, seqlen_k, HEAD_DIM, MASKED, TMA)
    v = _load_rows(v_src, start_n, offs_n, offs_d, stride_vn, seqlen_k, HEAD_DIM, MASKED, TMA)
    qk = tl.dot(q, tl.trans(k))
    qk = _score_mask(qk, offs_m[:, None], cols[None, :], seqlen_k, diag, kpm_ptr, window,
                     IS_CAUSAL, MASKED, HAS_KPM, WINDOW)
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if MASKED or HAS_KPM:  # a fully masked row keeps m = -inf: subtract 0 instead
        m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new_safe = m_new
    p = tl.math.exp2(qk * qk_scale - m_new_safe[:, None])  # one FMA per score
    alpha = tl.math.exp2(m_i - m_new_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:
        keep = _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p, offs_m.shape[0],
                             offs_n.shape[0])
        p = tl.where(keep, p, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def _slots(BASE, SLOT1, SLOT2, stride_slot, PACKED: tl.constexpr):
    """SLOT1 and SLOT2, or with PACKED slots 1 and 2 of the packed tensor BASE points to (its
    q, k, v or their gradients, `stride_slot` elements apart)."""
    if PACKED:
        SLOT1 = BASE + stride_slot
        SLOT2 = BASE + 2 * stride_slot
    return SLOT1, SLOT2


@triton.jit
def fwd_kernel(Q, K, V, O, LSE, KPM, CU_Q, CU_K, ROW_PTR, ROW_SPLIT, COL_IDX,
                stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                stride_vb, stride_vn, stride_vh, stride_slot, stride_ob, stride_on, stride_oh,
                stride_lb, stride_lh, stride_mb,
                seqlen_q, seqlen_k, n_heads, group_size, window_left, window_right, qk_scale,
                dropout_p, SEED, DESC1, DESC2,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                SPARSE: tl.constexpr, DROPOUT: tl.constexpr, REVERSE: tl.constexpr,
                LAYOUT_BLOCK: tl.constexpr, PACKED: tl.constexpr, TMA: tl.constexpr,
                WINDOW: tl.constexpr):
    K, V = _slots(Q, K, V, stride_slot, PACKED)
    seed, dropout_p = _dropout_args(SEED, dropout_p, DROPOUT)
    qk_scale = tl.cast(qk_scale, tl.float32)  # compiled graphs may pass Python floats as fp64
    bh, b, h, q_start, seqlen_q, k_start, seqlen_k, start_m = _query_block(
        CU_Q, CU_K, seqlen_q, seqlen_k, n_heads, BLOCK_M, VARLEN, REVERSE)
    if start_m >= seqlen_q:
        return
    diag = seqlen_k - seqlen_q
    window = (window_left, window_right)  # keys each side of the diagonal (WINDOW calls only)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    row_ok = offs_m < seqlen_q

    q_base = Q + b * stride_qb + q_start * stride_qn + h * stride_qh
    k_base = K + b * stride_kb + k_start * stride_kn + (h // group_size) * stride_kh
    v_base = V + b * stride_vb + k_start * stride_vn + (h // group_size) * stride_vh
    kpm_ptr = KPM  # batch b's row of the key-padding mask (None without one)
    if HAS_KPM:
        kpm_ptr = KPM + b * stride_mb
    q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    k_src = _row_source(k_base, stride_kn, seqlen_k, HEAD_DIM, BLOCK_N, BLOCK_D, TMA, DESC1, b,
                        h // group_size)
    v_src = _row_source(v_base, stride_vn, seqlen_k, HEAD_DIM, BLOCK_N, BLOCK_D, TMA, DESC2, b,
                        h // group_size)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if SPARSE:  # listed layout blocks, those needing no mask first (up to ROW_SPLIT), in tiles
        for masked in tl.static_range(2):  # blocks needing no mask, then those needing one
            t_lo, t_hi, blk = _tile_walk(ROW_PTR, ROW_SPLIT, COL_IDX, start_m, LAYOUT_BLOCK,
                                         BLOCK_N, masked == 1)
            for t in range(t_lo, t_hi):
                start_n, blk = _listed_tile(COL_IDX, blk, t, t_hi, LAYOUT_BLOCK, BLOCK_N)
                acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                           start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                           window, qk_scale, kpm_ptr, seed, bh, dropout_p,
                                           HEAD_DIM, BLOCK_D, IS_CAUSAL, masked == 1, HAS_KPM,
                                           DROPOUT, TMA, WINDOW)
    else:
        if WINDOW:  # keys outside the window are never visited; its left edge needs a mask
            lo, full_lo, full, hi = _window_key_ranges(start_m, seqlen_k, diag, window, BLOCK_M,
                                                       BLOCK_N)
            for start_n in range(lo, full_lo, BLOCK_N):
                acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                           start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                           window, qk_scale, kpm_ptr, seed, bh, dropout_p,
                                           HEAD_DIM, BLOCK_D, IS_CAUSAL, True, HAS_KPM, DROPOUT,
                                           TMA, WINDOW)
        else:
            full_lo = 0
            full, hi = _causal_key_ranges(start_m, seqlen_k, diag, BLOCK_M, BLOCK_N, IS_CAUSAL)
        for start_n in range(full_lo, full, BLOCK_N):
            acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                       start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                       window, qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM,
                                       BLOCK_D, IS_CAUSAL, False, HAS_KPM, DROPOUT, TMA, WINDOW)
        for start_n in range(full, hi, BLOCK_N):
            acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                       start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                       window, qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM,
                                       BLOCK_D, IS_CAUSAL, True, HAS_KPM, DROPOUT, TMA, WINDOW)

    empty = l_i == 0.0
    inv_l = tl.where(empty, 0.0, 1.0 / tl.where(empty, 1.0, l_i))
    if DROPOUT:
        inv_l = inv_l / (1.0 - dropout_p)
    out = acc * inv_l[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) / 1.4426950408889634)
    o_base = O + b * stride_ob + q_start * stride_on + h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])
    tl.store(LSE + b * stride_lb + h * stride_lh + q_start + offs_m, lse, mask=row_ok)


# --------------------------------------------------------------------------------------------
# Backward: delta = rowsum(dO * O); dQ per query block (which also writes each row's log2 lse and
# delta), then dK/dV per key block. The dK/dV pass that adds dQ with atomics takes the row stats
# from a kernel of their own.
# --------------------------------------------------------------------------------------------
@triton.jit
def _row_delta(o, do):
    """delta = rowsum(dO * O) in float32: the softmax backward's correction term."""
    return tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)


@triton.jit
def _log2_lse(lse):
    """The log-sum-exp in log2 units, +inf for rows that see no key (their probabilities are 0)."""
    return tl.where(lse == float("-inf"), float("inf"), lse) * 1.4426950408889634


@triton.jit
def _row_stats_base(STATS, b, h, q_start, stride_lb, stride_lh):
    """Where head h of sequence b starts in the row stats: twice its offset in the (contiguous)
    lse, one (log2 lse, delta) pair per row."""
    return STATS + 2 * (b * stride_lb + h * stride_lh + q_start)


@triton.jit
def _store_row_stats(STATS, offs_m, lse, delta, row_ok):
    """Store each row's (log2 lse, delta) pair, which the dK/dV pass reads with one load."""
    pairs = tl.join(_log2_lse(lse), delta)
    tl.store(STATS + offs_m[:, None] * 2 + tl.arange(0, 2)[None, :], pairs, mask=row_ok[:, None])


@triton.jit
def bwd_row_stats_kernel(O, DO, LSE, STATS, CU_Q,
                          stride_ob, stride_on, stride_oh, stride_db, stride_dn, stride_dh,
                          stride_lb, stride_lh, seqlen_q, n_heads,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                          VARLEN: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    q_start, seqlen_q = _seq_bounds(CU_Q, b, seqlen_q, VARLEN)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM)
    rows = (q_start + offs_m[:, None])
    o = tl.load(O + b * stride_ob + h * stride_oh + rows * stride_on + offs_d[None, :],
                mask=mask, other=0.0)
    do = tl.load(DO + b * stride_db + h * stride_dh + rows * stride_dn + offs_d[None, :],
                 mask=mask, other=0.0)
    row_ok = offs_m < seqlen_q
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + q_start + offs_m, mask=row_ok)
    _store_row_stats(_row_stats_base(STATS, b, h, q_start, stride_lb, stride_lh), offs_m, lse,
                     _row_delta(o, do), row_ok)


@triton.jit
def _dkdv_block(dk, dv, k, v, q_src, do_src, stats_base, dq_base, stride_qn, stride_dn,
                stride_dqn, start_m, start_n, offs_m0, offs_n, offs_d, seqlen_q, seqlen_k, diag,
                window, sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p,
                HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                TMA: tl.constexpr, WINDOW: tl.constexpr):
    """Contribution of one query block to dK and dV of the current key block (transposed tiles,
    keys as rows; with dropout at d <= 64 queries as rows); with ATOMIC_DQ also its dQ share, added
    to a float32 dQ in memory."""
    rows = start_m + offs_m0
    q = _load_rows(q_src, start_m, offs_m0, offs_d, stride_qn, seqlen_q, HEAD_DIM, MASKED, TMA)
    do = _load_rows(do_src, start_m, offs_m0, offs_d, stride_dn, seqlen_q, HEAD_DIM, MASKED, TMA)
    # the block's offset as one scalar, the rest loop-invariant (one add per load, not per pointer)
    stats_ptr = (stats_base + 2 * start_m) + (offs_m0[:, None] * 2 + tl.arange(0, 2)[None, :])
    if MASKED:
        lse, delta = tl.split(tl.load(stats_ptr, mask=(rows < seqlen_q)[:, None], other=0.0))
        lse = tl.where(rows < seqlen_q, lse, float("inf"))
    else:
        lse, delta = tl.split(tl.load(stats_ptr))
    if DROPOUT and offs_d.shape[0] <= 64:
        # scores with queries as rows, the layout the dropout uniforms are drawn in; P and dS
        # then reach the dV and dK products transposed, through shared memory (round 23; at
        # d = 128 this tile spills)
        qk = tl.dot(q, tl.trans(k))
        qk = _score_mask(qk, rows[:, None], offs_n[None, :], seqlen_k, diag, kpm_ptr, window,
                         IS_CAUSAL, MASKED, HAS_KPM, WINDOW)
        p = tl.math.exp2(qk * qk_scale - lse[:, None])
        dp = tl.dot(do, tl.trans(v))
        keep = _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p, offs_m0.shape[0],
                             offs_n.shape[0])
        scale = 1.0 / (1.0 - dropout_p)
        dv += tl.dot(tl.trans(tl.where(keep, p * scale, 0.0).to(do.dtype)), do)
        dp = tl.where(keep, dp * scale, 0.0)
        ds = (p * (dp - delta[:, None])).to(q.dtype)
        dk += tl.dot(tl.trans(ds), q)
    else:
        qkT = tl.dot(k, tl.trans(q))
        qkT = _score_mask(qkT, rows[None, :], offs_n[:, None], seqlen_k, diag, kpm_ptr, window,
                          IS_CAUSAL, MASKED, HAS_KPM, WINDOW)
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])
        dpT = tl.dot(v, tl.trans(do))
        if DROPOUT:
            scale = 1.0 / (1.0 - dropout_p)
            keepT = _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p,
                                  offs_m0.shape[0], offs_n.shape[0], TRANSPOSED=True)
            dv += tl.dot(tl.where(keepT, pT * scale, 0.0).to(do.dtype), do)
            dpT = tl.where(keepT, dpT * scale, 0.0)
        else:
            dv += tl.dot(pT.to(do.dtype), do)
        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)
        dk += tl.dot(dsT, q)
        ds = tl.trans(dsT)
    if ATOMIC_DQ:
        dq = tl.dot(ds, k) * sm_scale
        dq_mask = (rows[:, None] < seqlen_q) & (offs_d < HEAD_DIM)[None, :]
        tl.atomic_add(dq_base + rows[:, None] * stride_dqn + offs_d[None, :], dq, mask=dq_mask,
                      sem="relaxed")
    return dk, dv


@triton.jit
def bwd_dkdv_kernel(Q, K, V, DO, STATS, DK, DV, DQ, KPM, CU_Q, CU_K, COL_PTR, COL_SPLIT,
                     ROW_IDX, stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                     stride_vb, stride_vn, stride_vh, stride_db, stride_dn, stride_dh,
                     stride_dkb, stride_dkn, stride_dkh, stride_dvb, stride_dvn, stride_dvh,
                     stride_dqb, stride_dqn, stride_dqh, stride_slot,
                     stride_lb, stride_lh, stride_mb,
                     seqlen_q, seqlen_k, n_heads_kv, group_size, window_left, window_right,
                     sm_scale, qk_scale, dropout_p, SEED, DESC1, DESC2,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                     SPARSE: tl.constexpr, DROPOUT: tl.constexpr,
                     LAYOUT_BLOCK: tl.constexpr, ATOMIC_DQ: tl.constexpr, PACKED: tl.constexpr,
                     TMA: tl.constexpr, WINDOW: tl.constexpr):
    K, V = _slots(Q, K, V, stride_slot, PACKED)
    DK, DV = _slots(DK, DK, DV, stride_slot, PACKED)  # dQ is slot 0 of the packed gradient
    seed, dropout_p = _dropout_args(SEED, dropout_p, DROPOUT)
    sm_scale = tl.cast(sm_scale, tl.float32)  # compiled graphs may pass Python floats as fp64
    qk_scale = tl.cast(qk_scale, tl.float32)
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // n_heads_kv
    hk = bhk % n_heads_kv
    q_start, seqlen_q = _seq_bounds(CU_Q, b, seqlen_q, VARLEN)
    k_start, seqlen_k = _seq_bounds(CU_K, b, seqlen_k, VARLEN)
    start_n = pid_n * BLOCK_N
    if start_n >= seqlen_k:
        return
    diag = seqlen_k - seqlen_q
    window = (window_left, window_right)  # keys each side of the diagonal (WINDOW calls only)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < seqlen_k) & (offs_d[None, :] < HEAD_DIM)
    k = tl.load(K + b * stride_kb + hk * stride_kh + (k_start + offs_n[:, None]) * stride_kn
                + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + b * stride_vb + hk * stride_vh + (k_start + offs_n[:, None]) * stride_vn
                + offs_d[None, :], mask=kv_mask, other=0.0)
    kpm_ptr = KPM  # batch b's row of the key-padding mask (None without one)
    if HAS_KPM:
        kpm_ptr = KPM + b * stride_mb
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # Query-block ranges: [lo, mid) near the causal diagonal (or the window's edge) and
    # [end, hi) at the end need masks; [mid, end) is fully visible. A partial key block masks
    # everything.
    if WINDOW:
        lo, mid, end, hi = _window_query_ranges(start_n, seqlen_q, seqlen_k, diag, window,
                                                BLOCK_M, BLOCK_N)
    else:
        end = seqlen_q // BLOCK_M * BLOCK_M
        hi = seqlen_q
        lo = 0
        mid = 0
        if IS_CAUSAL:
            lo = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M
            mid = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M,
                             end)
            mid = tl.maximum(mid, lo)
        if start_n + BLOCK_N > seqlen_k:
            mid = tl.maximum(end, lo)
    for g in range(0, group_size):
        h = hk * group_size + g
        bh = b * (n_heads_kv * group_size) + h
        q_base = Q + b * stride_qb + q_start * stride_qn + h * stride_qh
        do_base = DO + b * stride_db + q_start * stride_dn + h * stride_dh
        q_src = _row_source(q_base, stride_qn, seqlen_q, HEAD_DIM, BLOCK_M, BLOCK_D, TMA, DESC1,
                            b, h)
        do_src = _row_source(do_base, stride_dn, seqlen_q, HEAD_DIM, BLOCK_M, BLOCK_D, TMA, DESC2,
                             b, h)
        stats_base = _row_stats_base(STATS, b, h, q_start, stride_lb, stride_lh)
        dq_base = DQ + b * stride_dqb + q_start * stride_dqn + h * stride_dqh
        if SPARSE:
            for masked in tl.static_range(2):  # blocks needing no mask, then those needing one
                t_lo, t_hi, blk = _tile_walk(COL_PTR, COL_SPLIT, ROW_IDX, start_n, LAYOUT_BLOCK,
                                             BLOCK_M, masked == 1)
                for t in range(t_lo, t_hi):
                    start_m, blk = _listed_tile(ROW_IDX, blk, t, t_hi, LAYOUT_BLOCK, BLOCK_M)
                    dk, dv = _dkdv_block(
                        dk, dv, k, v, q_src, do_src, stats_base, dq_base, stride_qn,
                        stride_dn, stride_dqn, start_m, start_n, offs_m0, offs_n, offs_d, seqlen_q,
                        seqlen_k, diag, window, sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p,
                        HEAD_DIM, IS_CAUSAL, masked == 1, HAS_KPM, DROPOUT, ATOMIC_DQ, TMA, WINDOW)
        else:
            for part in tl.static_range(3):  # masked head (causal diagonal), full middle, masked tail
                m_lo = lo if part == 0 else (mid if part == 1 else tl.maximum(mid, end))
                m_hi = mid if part == 0 else (end if part == 1 else hi)
                for start_m in range(m_lo, m_hi, BLOCK_M):
                    dk, dv = _dkdv_block(
                        dk, dv, k, v, q_src, do_src, stats_base, dq_base, stride_qn,
                        stride_dn, stride_dqn, start_m, start_n, offs_m0, offs_n, offs_d, seqlen_q,
                        seqlen_k, diag, window, sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p,
                        HEAD_DIM, IS_CAUSAL, part != 1, HAS_KPM, DROPOUT, ATOMIC_DQ, TMA, WINDOW)

    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + hk * stride_dkh + (k_start + offs_n[:, None]) * stride_dkn
             + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * stride_dvb + hk * stride_dvh + (k_start + offs_n[:, None]) * stride_dvn
             + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n, start_m,
              offs_m, offs_n, offs_d, seqlen_k, diag, window, qk_scale, kpm_ptr, seed, bh,
              dropout_p, HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
              HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr, TMA: tl.constexpr,
              WINDOW: tl.constexpr):
    """Contribution of one key block to dQ of the current query block."""
    cols = start_n + offs_n
    k = _load_rows(k_src, start_n, offs_n, offs_d, stride_kn, seqlen_k, HEAD_DIM, MASKED, TMA)
    v = _load_rows(v_src, start_n, offs_n, offs_d, stride_vn, seqlen_k, HEAD_DIM, MASKED, TMA)
    qk = tl.dot(q, tl.trans(k))
    qk = _score_mask(qk, offs_m[:, None], cols[None, :], seqlen_k, diag, kpm_ptr, window,
                     IS_CAUSAL, MASKED, HAS_KPM, WINDOW)
    p = tl.math.exp2(qk * qk_scale - lse[:, None])
    dp = tl.dot(do, tl.trans(v))
    if DROPOUT:
        keep = _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p, offs_m.shape[0],
                             offs_n.shape[0])
        dp = tl.where(keep, dp / (1.0 - dropout_p), 0.0)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k)
    return dq


@triton.jit
def bwd_dq_kernel(Q, K, V, O, DO, LSE, STATS, DQ, KPM, CU_Q, CU_K, ROW_PTR, ROW_SPLIT, COL_IDX,
                   stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                   stride_vb, stride_vn, stride_vh, stride_db, stride_dn, stride_dh,
                   stride_ob, stride_on, stride_oh,
                   stride_dqb, stride_dqn, stride_dqh, stride_slot, stride_lb, stride_lh, stride_mb,
                   seqlen_q, seqlen_k, n_heads, group_size, window_left, window_right, sm_scale,
                   qk_scale, dropout_p, SEED, DESC1, DESC2,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                   SPARSE: tl.constexpr, DROPOUT: tl.constexpr, REVERSE: tl.constexpr,
                   LAYOUT_BLOCK: tl.constexpr, PACKED: tl.constexpr, TMA: tl.constexpr,
                   WINDOW: tl.constexpr):
    K, V = _slots(Q, K, V, stride_slot, PACKED)
    seed, dropout_p = _dropout_args(SEED, dropout_p, DROPOUT)
    sm_scale = tl.cast(sm_scale, tl.float32)  # compiled graphs may pass Python floats as fp64
    qk_scale = tl.cast(qk_scale, tl.float32)
    bh, b, h, q_start, seqlen_q, k_start, seqlen_k, start_m = _query_block(
        CU_Q, CU_K, seqlen_q, seqlen_k, n_heads, BLOCK_M, VARLEN, REVERSE)
    if start_m >= seqlen_q:
        return
    diag = seqlen_k - seqlen_q
    window = (window_left, window_right)  # keys each side of the diagonal (WINDOW calls only)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < seqlen_q
    q_mask = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + (q_start + offs_m[:, None]) * stride_qn
                + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + b * stride_db + h * stride_dh + (q_start + offs_m[:, None]) * stride_dn
                 + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + b * stride_lb + h * stride_lh + q_start + offs_m, mask=row_ok,
                  other=float("inf"))
    o = tl.load(O + b * stride_ob + h * stride_oh + (q_start + offs_m[:, None]) * stride_on
                + offs_d[None, :], mask=q_mask, other=0.0)
    delta = _row_delta(o, do)
    _store_row_stats(_row_stats_base(STATS, b, h, q_start, stride_lb, stride_lh), offs_m, lse,
                     delta, row_ok)
    lse = _log2_lse(lse)
    k_base = K + b * stride_kb + k_start * stride_kn + (h // group_size) * stride_kh
    v_base = V + b * stride_vb + k_start * stride_vn + (h // group_size) * stride_vh
    k_src = _row_source(k_base, stride_kn, seqlen_k, HEAD_DIM, BLOCK_N, BLOCK_D, TMA, DESC1, b,
                        h // group_size)
    v_src = _row_source(v_base, stride_vn, seqlen_k, HEAD_DIM, BLOCK_N, BLOCK_D, TMA, DESC2, b,
                        h // group_size)
    kpm_ptr = KPM  # batch b's row of the key-padding mask (None without one)
    if HAS_KPM:
        kpm_ptr = KPM + b * stride_mb
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if SPARSE:
        for masked in tl.static_range(2):  # blocks needing no mask, then those needing one
            t_lo, t_hi, blk = _tile_walk(ROW_PTR, ROW_SPLIT, COL_IDX, start_m, LAYOUT_BLOCK,
                                         BLOCK_N, masked == 1)
            for t in range(t_lo, t_hi):
                start_n, blk = _listed_tile(COL_IDX, blk, t, t_hi, LAYOUT_BLOCK, BLOCK_N)
                dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn,
                               start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag, window,
                               qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM, IS_CAUSAL,
                               masked == 1, HAS_KPM, DROPOUT, TMA, WINDOW)
    else:
        if WINDOW:  # keys outside the window are never visited; its left edge needs a mask
            lo, full_lo, full, hi = _window_key_ranges(start_m, seqlen_k, diag, window, BLOCK_M,
                                                       BLOCK_N)
            for start_n in range(lo, full_lo, BLOCK_N):
                dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn,
                               start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag, window,
                               qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM, IS_CAUSAL, True,
                               HAS_KPM, DROPOUT, TMA, WINDOW)
        else:
            full_lo = 0
            full, hi = _causal_key_ranges(start_m, seqlen_k, diag, BLOCK_M, BLOCK_N, IS_CAUSAL)
        for start_n in range(full_lo, full, BLOCK_N):
            dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n,
                           start_m, offs_m, offs_n, offs_d, seqlen_k, diag, window, qk_scale,
                           kpm_ptr, seed, bh, dropout_p, HEAD_DIM, IS_CAUSAL, False, HAS_KPM,
                           DROPOUT, TMA, WINDOW)
        for start_n in range(full, hi, BLOCK_N):
            dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n,
                           start_m, offs_m, offs_n, offs_d, seqlen_k, diag, window, qk_scale,
                           kpm_ptr, seed, bh, dropout_p, HEAD_DIM, IS_CAUSAL, True, HAS_KPM,
                           DROPOUT, TMA, WINDOW)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + (q_start + offs_m[:, None]) * stride_dqn
             + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=q_mask)


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k"])  # a length of 1 stays a runtime int32
def dropout_mask_kernel(MASK, seqlen_q, seqlen_k, dropout_p, SEED,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    seed = tl.load(SEED)
    bh = tl.program_id(2)
    start_m = tl.program_id(0) * BLOCK_M
    start_n = tl.program_id(1) * BLOCK_N
    rows = start_m + tl.arange(0, BLOCK_M)
    cols = start_n + tl.arange(0, BLOCK_N)
    keep = _dropout_keep(seed, bh, start_m, start_n, seqlen_k, dropout_p, BLOCK_M, BLOCK_N)
    head = MASK + bh.to(tl.int64) * seqlen_q * seqlen_k  # masks past 2^31 elements in all
    ptrs = head + rows[:, None].to(tl.int64) * seqlen_k + cols[None, :]
    tl.store(ptrs, keep.to(tl.int8), mask=(rows[:, None] < seqlen_q) & (cols[None, :] < seqlen_k))
