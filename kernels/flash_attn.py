"""Exact FlashAttention in Triton: forward, backward and the autograd Function (paper Alg. 2 and 4).

Tensors use the flash-attn layout (batch, seqlen, heads, head_dim); packed variable-length batches
use (total_tokens, heads, head_dim) with cumulative sequence offsets. The same kernels serve the
block-sparse variant (kernels/blocksparse.py): with SPARSE set, a query block visits only the key
blocks listed for it in a CSR index (and a key block only its listed query blocks).

Conventions inside the kernels: scores are kept in the log2 domain (`qk_scale` = softmax_scale *
log2(e)), so softmax uses exp2; the log-sum-exp saved for the backward pass is in natural log units.
Rows that see no key produce zeros, lse = -inf, and zero gradients.
"""
import math
from typing import List, Optional, Tuple

import torch
import triton
import triton.language as tl
from triton.runtime import _allocation
from triton.tools.tensor_descriptor import TensorDescriptor

from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._python_dispatch import _get_current_dispatch_mode

from kernels import tuning
from kernels.torch_ops import check_kernel_input, interpreting, kernel_op, traceable

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 128


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
def _score_mask(qk, rows, cols, seqlen_k, diag, kpm_ptr,
                IS_CAUSAL: tl.constexpr, MASK_BOUNDS: tl.constexpr, HAS_KPM: tl.constexpr):
    """Set to -inf the scores of keys a query may not see: bounds, causal diagonal, padding."""
    if MASK_BOUNDS:
        valid = cols < seqlen_k
        if IS_CAUSAL:
            valid = valid & (cols <= rows + diag)
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
               offs_m, offs_n, offs_d, seqlen_k, diag, qk_scale, kpm_ptr,
               seed, bh, dropout_p,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr,
               TMA: tl.constexpr):
    """One key block of the online softmax: update the running max, sum and output."""
    cols = start_n + offs_n
    k = _load_rows(k_src, start_n, offs_n, offs_d, stride_kn, seqlen_k, HEAD_DIM, MASKED, TMA)
    v = _load_rows(v_src, start_n, offs_n, offs_d, stride_vn, seqlen_k, HEAD_DIM, MASKED, TMA)
    qk = tl.dot(q, tl.trans(k))
    qk = _score_mask(qk, offs_m[:, None], cols[None, :], seqlen_k, diag, kpm_ptr,
                     IS_CAUSAL, MASKED, HAS_KPM)
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
def _fwd_kernel(Q, K, V, O, LSE, KPM, CU_Q, CU_K, ROW_PTR, ROW_SPLIT, COL_IDX,
                stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                stride_vb, stride_vn, stride_vh, stride_slot, stride_ob, stride_on, stride_oh,
                stride_lb, stride_lh, stride_mb,
                seqlen_q, seqlen_k, n_heads, group_size, qk_scale, dropout_p, SEED, DESC1, DESC2,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                SPARSE: tl.constexpr, DROPOUT: tl.constexpr, REVERSE: tl.constexpr,
                LAYOUT_BLOCK: tl.constexpr, PACKED: tl.constexpr, TMA: tl.constexpr):
    K, V = _slots(Q, K, V, stride_slot, PACKED)
    seed, dropout_p = _dropout_args(SEED, dropout_p, DROPOUT)
    qk_scale = tl.cast(qk_scale, tl.float32)  # compiled graphs may pass Python floats as fp64
    bh, b, h, q_start, seqlen_q, k_start, seqlen_k, start_m = _query_block(
        CU_Q, CU_K, seqlen_q, seqlen_k, n_heads, BLOCK_M, VARLEN, REVERSE)
    if start_m >= seqlen_q:
        return
    diag = seqlen_k - seqlen_q
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
                                           qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM,
                                           BLOCK_D, IS_CAUSAL, masked == 1, HAS_KPM, DROPOUT, TMA)
    else:
        full, hi = _causal_key_ranges(start_m, seqlen_k, diag, BLOCK_M, BLOCK_N, IS_CAUSAL)
        for start_n in range(0, full, BLOCK_N):
            acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                       start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                       qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM, BLOCK_D,
                                       IS_CAUSAL, False, HAS_KPM, DROPOUT, TMA)
        for start_n in range(full, hi, BLOCK_N):
            acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn,
                                       start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                                       qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM, BLOCK_D,
                                       IS_CAUSAL, True, HAS_KPM, DROPOUT, TMA)

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
def _bwd_row_stats_kernel(O, DO, LSE, STATS, CU_Q,
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
                sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p,
                HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                TMA: tl.constexpr):
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
        qk = _score_mask(qk, rows[:, None], offs_n[None, :], seqlen_k, diag, kpm_ptr,
                         IS_CAUSAL, MASKED, HAS_KPM)
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
        qkT = _score_mask(qkT, rows[None, :], offs_n[:, None], seqlen_k, diag, kpm_ptr,
                          IS_CAUSAL, MASKED, HAS_KPM)
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
def _bwd_dkdv_kernel(Q, K, V, DO, STATS, DK, DV, DQ, KPM, CU_Q, CU_K, COL_PTR, COL_SPLIT,
                     ROW_IDX, stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                     stride_vb, stride_vn, stride_vh, stride_db, stride_dn, stride_dh,
                     stride_dkb, stride_dkn, stride_dkh, stride_dvb, stride_dvn, stride_dvh,
                     stride_dqb, stride_dqn, stride_dqh, stride_slot,
                     stride_lb, stride_lh, stride_mb,
                     seqlen_q, seqlen_k, n_heads_kv, group_size, sm_scale, qk_scale,
                     dropout_p, SEED, DESC1, DESC2,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                     SPARSE: tl.constexpr, DROPOUT: tl.constexpr,
                     LAYOUT_BLOCK: tl.constexpr, ATOMIC_DQ: tl.constexpr, PACKED: tl.constexpr,
                     TMA: tl.constexpr):
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

    # Query-block ranges: [lo, mid) near the causal diagonal and [tail, seqlen_q) at the end need
    # masks; [mid, tail) is fully visible. A partial key block masks everything.
    tail = seqlen_q // BLOCK_M * BLOCK_M
    lo = 0
    mid = 0
    if IS_CAUSAL:
        lo = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M
        mid = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M, tail)
        mid = tl.maximum(mid, lo)
    if start_n + BLOCK_N > seqlen_k:
        mid = tl.maximum(tail, lo)
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
                        seqlen_k, diag, sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM,
                        IS_CAUSAL, masked == 1, HAS_KPM, DROPOUT, ATOMIC_DQ, TMA)
        else:
            for part in tl.static_range(3):  # masked head (causal diagonal), full middle, masked tail
                m_lo = lo if part == 0 else (mid if part == 1 else tl.maximum(mid, tail))
                m_hi = mid if part == 0 else (tail if part == 1 else seqlen_q)
                for start_m in range(m_lo, m_hi, BLOCK_M):
                    dk, dv = _dkdv_block(
                        dk, dv, k, v, q_src, do_src, stats_base, dq_base, stride_qn,
                        stride_dn, stride_dqn, start_m, start_n, offs_m0, offs_n, offs_d, seqlen_q,
                        seqlen_k, diag, sm_scale, qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM,
                        IS_CAUSAL, part != 1, HAS_KPM, DROPOUT, ATOMIC_DQ, TMA)

    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + hk * stride_dkh + (k_start + offs_n[:, None]) * stride_dkn
             + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * stride_dvb + hk * stride_dvh + (k_start + offs_n[:, None]) * stride_dvn
             + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n, start_m,
              offs_m, offs_n, offs_d, seqlen_k, diag, qk_scale, kpm_ptr, seed, bh, dropout_p,
              HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
              HAS_KPM: tl.constexpr, DROPOUT: tl.constexpr, TMA: tl.constexpr):
    """Contribution of one key block to dQ of the current query block."""
    cols = start_n + offs_n
    k = _load_rows(k_src, start_n, offs_n, offs_d, stride_kn, seqlen_k, HEAD_DIM, MASKED, TMA)
    v = _load_rows(v_src, start_n, offs_n, offs_d, stride_vn, seqlen_k, HEAD_DIM, MASKED, TMA)
    qk = tl.dot(q, tl.trans(k))
    qk = _score_mask(qk, offs_m[:, None], cols[None, :], seqlen_k, diag, kpm_ptr,
                     IS_CAUSAL, MASKED, HAS_KPM)
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
def _bwd_dq_kernel(Q, K, V, O, DO, LSE, STATS, DQ, KPM, CU_Q, CU_K, ROW_PTR, ROW_SPLIT, COL_IDX,
                   stride_qb, stride_qn, stride_qh, stride_kb, stride_kn, stride_kh,
                   stride_vb, stride_vn, stride_vh, stride_db, stride_dn, stride_dh,
                   stride_ob, stride_on, stride_oh,
                   stride_dqb, stride_dqn, stride_dqh, stride_slot, stride_lb, stride_lh, stride_mb,
                   seqlen_q, seqlen_k, n_heads, group_size, sm_scale, qk_scale, dropout_p, SEED,
                   DESC1, DESC2, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   IS_CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, VARLEN: tl.constexpr,
                   SPARSE: tl.constexpr, DROPOUT: tl.constexpr, REVERSE: tl.constexpr,
                   LAYOUT_BLOCK: tl.constexpr, PACKED: tl.constexpr, TMA: tl.constexpr):
    K, V = _slots(Q, K, V, stride_slot, PACKED)
    seed, dropout_p = _dropout_args(SEED, dropout_p, DROPOUT)
    sm_scale = tl.cast(sm_scale, tl.float32)  # compiled graphs may pass Python floats as fp64
    qk_scale = tl.cast(qk_scale, tl.float32)
    bh, b, h, q_start, seqlen_q, k_start, seqlen_k, start_m = _query_block(
        CU_Q, CU_K, seqlen_q, seqlen_k, n_heads, BLOCK_M, VARLEN, REVERSE)
    if start_m >= seqlen_q:
        return
    diag = seqlen_k - seqlen_q
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
                               start_n, start_m, offs_m, offs_n, offs_d, seqlen_k, diag,
                               qk_scale, kpm_ptr, seed, bh, dropout_p, HEAD_DIM, IS_CAUSAL,
                               masked == 1, HAS_KPM, DROPOUT, TMA)
    else:
        full, hi = _causal_key_ranges(start_m, seqlen_k, diag, BLOCK_M, BLOCK_N, IS_CAUSAL)
        for start_n in range(0, full, BLOCK_N):
            dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n,
                           start_m, offs_m, offs_n, offs_d, seqlen_k, diag, qk_scale, kpm_ptr, seed,
                           bh, dropout_p, HEAD_DIM, IS_CAUSAL, False, HAS_KPM, DROPOUT, TMA)
        for start_n in range(full, hi, BLOCK_N):
            dq = _dq_block(dq, q, do, lse, delta, k_src, v_src, stride_kn, stride_vn, start_n,
                           start_m, offs_m, offs_n, offs_d, seqlen_k, diag, qk_scale, kpm_ptr, seed,
                           bh, dropout_p, HEAD_DIM, IS_CAUSAL, True, HAS_KPM, DROPOUT, TMA)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + (q_start + offs_m[:, None]) * stride_dqn
             + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=q_mask)


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k"])  # a length of 1 stays a runtime int32
def _dropout_mask_kernel(MASK, seqlen_q, seqlen_k, dropout_p, SEED,
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


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------
def block_d_for(head_dim):
    """Register tile width for a head dim: the next power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def _cdiv(a, b):
    """ceil(a / b) in plain Python: triton.cdiv is a constexpr function whose host calls cost
    microseconds each, several per attention call."""
    return (a + b - 1) // b


def _strides(x, varlen):
    """(batch, seq, head) strides of a (B, N, H, d) tensor or a packed (total, H, d) one."""
    s = x.stride()
    return (0, s[0], s[1]) if varlen else s[:3]


class _Problem:
    """Shapes and options of one attention call, shared by the forward and backward launchers."""

    def __init__(self, q, k, sm_scale, causal, kpm, cu_q, cu_k, max_q, max_k, dropout_p, seed,
                 sparse, packed=None):
        self.varlen = cu_q is not None
        if self.varlen:
            self.batch = cu_q.numel() - 1
            self.seqlen_q, self.seqlen_k = max_q, max_k
        else:
            self.batch, self.seqlen_q = q.shape[0], q.shape[1]
            self.seqlen_k = k.shape[1]
        # the head dim picks tiles and compile-time constants: a compiled graph that made it
        # symbolic (having seen two) gets it specialized here, guarded by the graph
        self.heads, self.head_dim = q.shape[-2], int(q.shape[-1])
        self.heads_kv = k.shape[-2]
        self.group = self.heads // self.heads_kv
        self.block_d = block_d_for(self.head_dim)
        self.sm_scale, self.causal, self.dropout_p = sm_scale, causal, dropout_p
        # a packed qkv whose views q and k are: kernels get the packed tensor, never a view (which
        # compiled graphs would copy), and find k and v in it themselves
        self.packed = packed
        self.slot_stride = packed.stride(-3) if packed is not None else 0
        # Pointers a call does not read are None (constexpr to Triton): compiled graphs would copy
        # any tensor passed in their place, since their mutation analysis takes every tensor that
        # reaches a helper whose result addresses a store (e.g. cu_seqlens) for a mutated one.
        self.seed = seed  # (1,) int64 on the device with dropout, else None
        self.kpm, self.cu_q, self.cu_k, self.sparse = kpm, cu_q, cu_k, sparse
        self.kpm_stride = kpm.stride(0) if kpm is not None else 0

    def inputs(self, q, k, v):
        """The q, k, v pointer arguments: the packed tensor alone for a packed call."""
        return (self.packed, None, None) if self.packed is not None else (q, k, v)

    def lists(self, rows):
        """The block-sparse lists by block row (or column), None for dense calls."""
        if self.sparse is None:
            return (None,) * 3
        return self.sparse.row_lists() if rows else self.sparse.col_lists()

    def layout_rows(self):
        """(tokens per layout block, blocks listed per block row on average) of a block-sparse
        call; (0, 0.0) for a dense one."""
        if self.sparse is None:
            return 0, 0.0
        row_ptr, _, col_idx = self.sparse.row_lists()
        return self.sparse.block, col_idx.numel() / max(row_ptr.numel() - 1, 1)

    def lse_buffer(self, q):
        if self.varlen:
            return torch.empty(self.heads, q.shape[0], device=q.device, dtype=torch.float32)
        return torch.empty(self.batch, self.heads, self.seqlen_q, device=q.device,
                           dtype=torch.float32)

    def lse_strides(self, lse):
        return (0, lse.stride(0)) if self.varlen else (lse.stride(0), lse.stride(1))

    def flags(self):
        return dict(HEAD_DIM=self.head_dim, BLOCK_D=self.block_d, IS_CAUSAL=self.causal,
                    HAS_KPM=self.kpm is not None, VARLEN=self.varlen,
                    SPARSE=self.sparse is not None, DROPOUT=self.dropout_p > 0.0,
                    PACKED=self.packed is not None)

    def tma_ready(self, *tensors):
        """Whether a kernel may load these tensors' tiles through TMA descriptors: aligned, and
        head dims that fill the tile (the ones measured)."""
        return self.head_dim == self.block_d and all(_tma_aligned(t) for t in tensors)

    def tiles(self, config, *streamed):
        """`config` fitted to this call: tiles of a block-sparse call inside the layout's blocks
        (LAYOUT_BLOCK); TMA loads kept only where the `streamed` tensors allow them. The
        launcher's descriptors need (batch, seq, heads, d) tensors of their own (not varlen, not
        packed) in an eager call: a compiled graph's `triton_op` cannot hand descriptors to its
        kernels (torch 2.11), so traced calls take pointer loads instead."""
        tma = config.get("TMA", tuning.POINTER_LOADS)
        if not self.tma_ready(*streamed):
            tma = tuning.POINTER_LOADS
        traced = any(type(t) is not torch.Tensor for t in streamed)
        if tma == tuning.HOST_DESCRIPTORS and (self.varlen or self.packed is not None or traced):
            tma = tuning.POINTER_LOADS
        config = dict(config, TMA=tma)
        if self.sparse is None:
            return dict(config, LAYOUT_BLOCK=1)
        block = self.sparse.block
        return dict(config, BLOCK_M=min(config["BLOCK_M"], block),
                    BLOCK_N=min(config["BLOCK_N"], block), LAYOUT_BLOCK=block)


def _tma_aligned(t):
    """Whether TMA descriptors can address tensor t: 16-byte aligned start and strides. Tensors
    traced by a compiled graph have no address; their allocations are aligned, so their offset
    decides, and a symbolic size counts as aligned only where that holds for every value."""
    start = t.data_ptr() if type(t) is torch.Tensor else t.storage_offset() * t.element_size()
    return all(statically_known_true(x % 16 == 0)
               for x in (start, *(s * t.element_size() for s in t.stride()[:-1])))


def _torch_scratch(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_scratch_allocator():
    """Kernels that build TMA descriptors need global scratch memory at launch, which Triton
    takes from the allocator set with `triton.set_allocator`; where none was set, take it from
    PyTorch's caching allocator."""
    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_torch_scratch)


_STAGE_CAPS = {}  # (kernel, tile config) -> pipeline depth that fit in shared memory


def _launch(kernel, grid, args, config, **flags):
    """Launch `kernel`; if its pipeline does not fit in shared memory, retry with fewer stages."""
    if config.get("TMA") == tuning.PROGRAM_DESCRIPTORS:
        _ensure_scratch_allocator()
    key = (kernel.fn.__name__, tuple(sorted(config.items())), tuple(sorted(flags.items())))
    config = dict(config, num_stages=_STAGE_CAPS.get(key, config["num_stages"]))
    while True:
        try:
            return traceable(kernel, args[0])[grid](*args, **flags, **config)
        except triton.runtime.errors.OutOfResources:
            if config["num_stages"] <= 1:
                raise
            config["num_stages"] -= 1
            _STAGE_CAPS[key] = config["num_stages"]


def _host_descs(config, rows, *tensors):
    """The kernel's DESC1, DESC2: with host descriptors (`tuning.TMA_MODES`) one per streamed
    (batch, seq, heads, d) tensor, loading `rows` x d tiles of one head; else None."""
    if config.get("TMA") != tuning.HOST_DESCRIPTORS:
        return (None,) * len(tensors)
    return tuple(TensorDescriptor.from_tensor(t, [1, rows, 1, t.shape[-1]]) for t in tensors)


def _forward(q, k, v, prob, config=None):
    sp = prob.sparse
    config = prob.tiles(config or tuning.forward_config(
        prob.block_d, prob.causal, sp is not None, prob.seqlen_q, prob.dropout_p > 0.0,
        *prob.layout_rows()), k, v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = prob.lse_buffer(q)
    grid = (_cdiv(prob.seqlen_q, config["BLOCK_M"]), prob.batch * prob.heads)
    args = (*prob.inputs(q, k, v), o, lse, prob.kpm, prob.cu_q, prob.cu_k, *prob.lists(rows=True),
            *_strides(q, prob.varlen), *_strides(k, prob.varlen), *_strides(v, prob.varlen),
            prob.slot_stride, *_strides(o, prob.varlen), *prob.lse_strides(lse),
            prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads, prob.group,
            prob.sm_scale * LOG2E, prob.dropout_p, prob.seed,
            *_host_descs(config, config["BLOCK_N"], k, v))
    _launch(_fwd_kernel, grid, args, config, REVERSE=prob.causal and sp is None, **prob.flags())
    return o, lse


def _gradient_buffers(q, k, v, prob, atomic):
    """(dq, dk, dv, dqkv) pointer arguments and the (batch, seq, head) strides of dq, dk, dv.

    A packed call gets one gradient dqkv like its qkv: dQ is its slot 0 (unless added with
    atomics: then a float32 buffer) and the dK/dV kernel finds slots 1 and 2 itself (dv is then
    None). Kernels never write views, which compiled graphs would copy back."""
    varlen = prob.varlen
    dqkv = torch.empty_like(prob.packed) if prob.packed is not None else None
    if atomic:
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dq_strides = _strides(dq, varlen)
    elif dqkv is not None:
        dq, dq_strides = dqkv, _strides(dqkv.select(-3, 0), varlen)
    else:
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dq_strides = _strides(dq, varlen)
    if dqkv is not None:
        slot_strides = _strides(dqkv.select(-3, 1), varlen)
        return (dq, dqkv, None, dqkv), (dq_strides, slot_strides, slot_strides)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    return (dq, dk, dv, None), (dq_strides, _strides(dk, varlen), _strides(dv, varlen))


def _backward(do, q, k, v, o, lse, prob, deterministic=True, configs=None, atomic=None):
    """[dq, dk, dv], or [dqkv] for a packed call: a dQ pass (which also writes the row stats) then
    a dK/dV pass; or, where `tuning.atomic_dq` finds it faster and `deterministic` is False, one
    pass whose dK/dV kernel also adds each block's dQ share to a float32 dQ with atomics
    (order-dependent rounding). atomic: force one of the two (sweeps)."""
    if atomic is None:
        atomic = not deterministic and tuning.atomic_dq(prob.dropout_p, prob.block_d)
    configs = configs or tuning.backward_configs(prob.block_d, atomic, prob.sparse is not None,
                                                 prob.seqlen_q)
    dkdv_cfg = prob.tiles(configs[0], q, do)
    dq_cfg = prob.tiles(configs[1], k, v) if configs[1] else None
    (dq, dk, dv, dqkv), (dq_strides, dk_strides, dv_strides) = _gradient_buffers(
        q, k, v, prob, atomic)
    # each row's (log2 lse, delta), at twice the row's offset in lse (hence lse contiguous)
    lse = lse.contiguous()
    stats = torch.empty(*lse.shape, 2, dtype=torch.float32, device=lse.device)
    lse_strides = prob.lse_strides(lse)
    flags = prob.flags()
    sp = prob.sparse
    inputs = prob.inputs(q, k, v)
    common = (*_strides(q, prob.varlen), *_strides(k, prob.varlen), *_strides(v, prob.varlen),
              *_strides(do, prob.varlen))
    if atomic:
        traceable(_bwd_row_stats_kernel, o)[(_cdiv(prob.seqlen_q, 64), prob.batch * prob.heads)](
            o, do, lse, stats, prob.cu_q, *_strides(o, prob.varlen), *_strides(do, prob.varlen),
            *lse_strides, prob.seqlen_q, prob.heads, HEAD_DIM=prob.head_dim, BLOCK_D=prob.block_d,
            BLOCK_M=64, VARLEN=prob.varlen)
    else:  # the dQ pass writes the row stats, which the dK/dV pass reads
        dq_args = (*inputs, o, do, lse, stats, dq, prob.kpm, prob.cu_q, prob.cu_k,
                   *prob.lists(rows=True), *common,
                   *_strides(o, prob.varlen), *dq_strides, prob.slot_stride, *lse_strides,
                   prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads, prob.group,
                   prob.sm_scale, prob.sm_scale * LOG2E, prob.dropout_p, prob.seed,
                   *_host_descs(dq_cfg, dq_cfg["BLOCK_N"], k, v))
        _launch(_bwd_dq_kernel, (_cdiv(prob.seqlen_q, dq_cfg["BLOCK_M"]),
                                 prob.batch * prob.heads),
                dq_args, dq_cfg, REVERSE=prob.causal and sp is None, **flags)
    dkdv_args = (*inputs, do, stats, dk, dv, dq, prob.kpm, prob.cu_q, prob.cu_k,
                 *prob.lists(rows=False), *common,
                 *dk_strides, *dv_strides, *dq_strides, prob.slot_stride, *lse_strides,
                 prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads_kv, prob.group,
                 prob.sm_scale, prob.sm_scale * LOG2E, prob.dropout_p, prob.seed,
                 *_host_descs(dkdv_cfg, dkdv_cfg["BLOCK_M"], q, do))
    _launch(_bwd_dkdv_kernel, (_cdiv(prob.seqlen_k, dkdv_cfg["BLOCK_N"]),
                               prob.batch * prob.heads_kv), dkdv_args, dkdv_cfg,
            ATOMIC_DQ=atomic, **flags)
    if dqkv is None:
        return [dq.to(q.dtype) if atomic else dq, dk, dv]
    if atomic:
        dqkv.select(-3, 0).copy_(dq)
    return [dqkv]


# --------------------------------------------------------------------------------------------
# Autograd
# --------------------------------------------------------------------------------------------
class _SparseLists:
    """CSR block lists handed to the kernels: (row_ptr, row_split, col_idx, col_ptr, col_split,
    row_idx) of a layout at `block` tokens per block."""

    def __init__(self, block, lists):
        self.block, self.lists = block, lists

    def row_lists(self):
        return self.lists[:3]

    def col_lists(self):
        return self.lists[3:]


def _problem(q, k, seed, kpm, cu_q, cu_k, sparse, max_q, max_k, block, causal, sm_scale,
             dropout_p, packed=None):
    lists = _SparseLists(block, sparse) if sparse else None
    return _Problem(q, k, sm_scale, causal, kpm, cu_q, cu_k, max_q, max_k, dropout_p, seed, lists,
                    packed)


def _fixed_strides(*tensors):
    """The tensors, made contiguous while a compiled graph traces the op (they are then fake or
    functional tensor subclasses). Inductor promises a Triton kernel's inputs only their stride
    order, not their strides, so the strides the launchers read while tracing must be the only ones
    that order allows: those of a contiguous tensor. Eager calls keep strided views and pay no
    copy."""
    if all(t is None or type(t) is torch.Tensor for t in tensors):
        return tensors
    return tuple(None if t is None else t.contiguous() for t in tensors)


def _unpack(q, k, v):
    """(packed, q, k, v): k and v None mean that q is a packed qkv (..., 3, H, d), whose slots
    become q, k, v (views that give the shapes and strides; kernels get the packed tensor)."""
    if k is None:
        return (q, *q.unbind(-3))
    return None, q, k, v


def _flash_fwd(q: torch.Tensor, k: Optional[torch.Tensor], v: Optional[torch.Tensor],
               seed: Optional[torch.Tensor], kpm: Optional[torch.Tensor],
               cu_q: Optional[torch.Tensor], cu_k: Optional[torch.Tensor],
               sparse: List[torch.Tensor], max_q: int, max_k: int,
               block: int, causal: bool, sm_scale: float, dropout_p: float,
               deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, lse); k and v None: q is a packed qkv. `deterministic` is saved for the backward."""
    q, k, v, kpm, cu_q, cu_k = _fixed_strides(q, k, v, kpm, cu_q, cu_k)
    packed, q, k, v = _unpack(q, k, v)
    prob = _problem(q, k, seed, kpm, cu_q, cu_k, sparse, max_q, max_k, block, causal, sm_scale,
                    dropout_p, packed)
    return _forward(q, k, v, prob)


def _flash_bwd(do: torch.Tensor, q: torch.Tensor, k: Optional[torch.Tensor],
               v: Optional[torch.Tensor], o: torch.Tensor, lse: torch.Tensor,
               seed: Optional[torch.Tensor], kpm: Optional[torch.Tensor],
               cu_q: Optional[torch.Tensor], cu_k: Optional[torch.Tensor],
               sparse: List[torch.Tensor], max_q: int, max_k: int,
               block: int, causal: bool, sm_scale: float, dropout_p: float,
               deterministic: bool) -> List[torch.Tensor]:
    """[dq, dk, dv], or [dqkv] for a packed qkv."""
    do, q, k, v, o, kpm, cu_q, cu_k = _fixed_strides(do, q, k, v, o, kpm, cu_q, cu_k)
    packed, q, k, v = _unpack(q, k, v)
    prob = _problem(q, k, seed, kpm, cu_q, cu_k, sparse, max_q, max_k, block, causal, sm_scale,
                    dropout_p, packed)
    return _backward(do if do.stride(-1) == 1 else do.contiguous(), q, k, v, o, lse, prob,
                     deterministic)


def _flash_fwd_fake(q, k, v, seed, kpm, cu_q, cu_k, sparse, max_q, max_k, block, causal, sm_scale,
                    dropout_p, deterministic):
    _, q, _, _ = _unpack(q, k, v)
    if cu_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device), lse


def _flash_bwd_fake(do, q, k, v, o, lse, seed, kpm, cu_q, cu_k, sparse, max_q, max_k, block,
                    causal, sm_scale, dropout_p, deterministic):
    return [torch.empty_like(x) for x in (q, k, v) if x is not None]


_flash_fwd_op = kernel_op("fa_train::flash_attn_fwd")(_flash_fwd)
_flash_bwd_op = kernel_op("fa_train::flash_attn_bwd")(_flash_bwd)
if interpreting():  # shape functions for the plain custom ops; a triton_op traces its own body
    _flash_fwd_op.register_fake(_flash_fwd_fake)
    _flash_bwd_op.register_fake(_flash_bwd_fake)


def _save_for_backward(ctx, inputs, output):
    q, k, v, seed, kpm, cu_q, cu_k, sparse, *options = inputs
    ctx.save_for_backward(q, k, v, *output, seed, kpm, cu_q, cu_k, *sparse)
    ctx.options = options
    ctx.mark_non_differentiable(output[1])


def _gradients(ctx, do, backward):
    """The gradients of q, k, v from the saved tensors through `backward` (the op or its plain
    function): (dqkv, None, None) for a packed qkv."""
    q, k, v, o, lse, seed, kpm, cu_q, cu_k, *sparse = ctx.saved_tensors
    grads = backward(do, q, k, v, o, lse, seed, kpm, cu_q, cu_k, sparse, *ctx.options)
    return (grads[0], None, None) if k is None else tuple(grads)


def _op_backward(ctx, do, _dlse):
    # one entry per input: seed, kpm, cu_q, cu_k, the sparse list, then the options
    n_sparse = len(ctx.saved_tensors) - 9
    return (*_gradients(ctx, do, _flash_bwd_op), None, None, None, None,
            [None] * n_sparse) + (None,) * len(ctx.options)


_flash_fwd_op.register_autograd(_op_backward, setup_context=_save_for_backward)


class _EagerAttention(torch.autograd.Function):
    """The same forward and backward for eager calls, without the ops' dispatch: a custom op
    costs about 0.1 ms of host time per call (kernels/NOTES.md), as much as a short kernel."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _flash_fwd(*inputs)
        _save_for_backward(ctx, inputs, output)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, _dlse):
        return (*_gradients(ctx, do, _flash_bwd), *[None] * (5 + len(ctx.options)))


def _attention(*inputs):
    """The attention op while a graph is traced or a dispatch mode watches (torch.compile,
    make_fx, tensor subclasses, FLOP counters: the op shows them the call), else the eager
    autograd function."""
    if (torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None
            or type(inputs[0]) is not torch.Tensor):
        return _flash_fwd_op(*inputs)
    return _EagerAttention.apply(*inputs)


# --------------------------------------------------------------------------------------------
# Input checks and public API
# --------------------------------------------------------------------------------------------
def _draw_seed(device):
    """A dropout seed as a (1,) int64 tensor on `device`, from that device's default generator
    (seeded by torch.manual_seed); drawn on the device, so no host synchronization."""
    return torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64, device=device)


def next_dropout_seed(device=None):
    """Seed that the next dropout call on `device` will draw (the generator is left unchanged).

    device: default "cuda", or "cpu" under the interpreter."""
    device = torch.device(device or ("cpu" if interpreting() else "cuda"))
    if device.type == "cuda":
        generator = torch.cuda.default_generators[device.index if device.index is not None
                                                  else torch.cuda.current_device()]
    else:
        generator = torch.default_generator
    state = generator.get_state()
    seed = int(_draw_seed(device).item())
    generator.set_state(state)
    return seed


_LAYOUTS = {4: "(batch, seqlen, heads, head_dim)", 3: "(total_tokens, heads, head_dim)"}
_PACKED_LAYOUTS = {5: "(batch, seqlen, 3, heads, head_dim)", 4: "(total_tokens, 3, heads, head_dim)"}


def _check_tensor(name, x, ndim, layout):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims {layout}, got shape {tuple(x.shape)}")
    check_kernel_input(name, x)


def _check_head_dim(head_dim):
    if head_dim > MAX_HEAD_DIM or head_dim < 1:
        raise ValueError(f"head_dim {head_dim} is not supported; use 1 <= head_dim <= {MAX_HEAD_DIM}")


def check_qkv(q, k, v, ndim):
    """Validate q, k, v (shapes, dtypes, devices); return them with a unit last stride
    (contiguous while torch.compile traces)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, x, ndim, _LAYOUTS[ndim])
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if ndim == 4 and k.shape[0] != q.shape[0]:
        raise ValueError(f"batch size of k ({k.shape[0]}) differs from q ({q.shape[0]})")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"head_dim of k ({k.shape[-1]}) differs from q ({q.shape[-1]})")
    _check_head_dim(q.shape[-1])
    if q.shape[-2] % k.shape[-2]:
        raise ValueError(f"q heads ({q.shape[-2]}) must be a multiple of k/v heads ({k.shape[-2]})")
    if torch.compiler.is_compiling():  # copied once here: the saved q, k, v need no second copy
        return q.contiguous(), k.contiguous(), v.contiguous()  # in the backward op
    return tuple(x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))


def check_qkvpacked(qkv, ndim):
    """Validate a packed qkv (5 dims, or 4 when varlen) whose dim -3 holds q, k, v; return it with
    a unit last stride (contiguous while torch.compile traces: a projection's output already is)."""
    _check_tensor("qkv", qkv, ndim, _PACKED_LAYOUTS[ndim])
    if qkv.shape[-3] != 3:
        raise ValueError(f"qkv must hold q, k, v along dim {ndim - 3} (size 3), got shape "
                         f"{tuple(qkv.shape)}")
    _check_head_dim(qkv.shape[-1])
    return qkv.contiguous() if torch.compiler.is_compiling() or qkv.stride(-1) != 1 else qkv


def _check_dropout(dropout_p):
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")


def _scale(softmax_scale, head_dim):
    return 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)


def check_key_padding_mask(key_padding_mask, q, k):
    """Validate a (batch, seqlen_k) bool mask; return it as uint8 for the kernels (or None)."""
    if key_padding_mask is None:
        return None
    expected = (q.shape[0], k.shape[1])
    if tuple(key_padding_mask.shape) != expected:
        raise ValueError(f"key_padding_mask must have shape (batch, seqlen_k) = {expected}, "
                         f"got {tuple(key_padding_mask.shape)}")
    if key_padding_mask.device != q.device:
        raise ValueError(f"key_padding_mask is on {key_padding_mask.device}, q on {q.device}")
    return key_padding_mask.to(torch.uint8).contiguous()


def attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm, cu_q=None, cu_k=None,
                   max_q=None, max_k=None, sparse=None, deterministic=False):
    """Run the attention op (with autograd) for prepared inputs; returns (out, lse).

    sparse: a block-sparse index with `block`, `row_lists()` and `col_lists()`, or None.
    deterministic: a backward with no atomics, bitwise reproducible (a dQ pass of its own).
    """
    _check_dropout(dropout_p)
    # a tensor, so that compiled graphs need not leave the graph to draw it
    seed = _draw_seed(q.device) if dropout_p > 0.0 else None
    lists = [*sparse.row_lists(), *sparse.col_lists()] if sparse is not None else []
    return _attention(q, k, v, seed, kpm, cu_q, cu_k, lists, int(max_q or 0), int(max_k or 0),
                         sparse.block if sparse is not None else 0, bool(causal),
                         _scale(softmax_scale, q.shape[-1]), float(dropout_p), bool(deterministic))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    key_padding_mask=None, return_lse=False, deterministic=False):
    """Exact attention, q (B, Nq, Hq, d), k and v (B, Nk, Hkv, d) with Hq % Hkv == 0.

    causal aligns the mask bottom-right (query i sees keys j <= i + Nk - Nq); key_padding_mask is a
    (B, Nk) bool tensor, True = keep. Returns out (B, Nq, Hq, d) and, with return_lse, the
    log-sum-exp (B, Hq, Nq) in float32. With dropout the backward adds dQ with float32 atomics,
    whose order varies; deterministic=True keeps a separate dQ pass (bitwise reproducible).
    """
    q, k, v = check_qkv(q, k, v, 4)
    kpm = check_key_padding_mask(key_padding_mask, q, k)
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm,
                              deterministic=deterministic)
    return (out, lse) if return_lse else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              key_padding_mask=None, return_lse=False, deterministic=False):
    """flash_attn_func over q, k, v packed in one tensor qkv (B, N, 3, H, d), as a fused q/k/v
    projection makes them: the forward reads the three in place and the backward writes one packed
    gradient, so no pass copies them (not even in compiled graphs). Returns out (B, N, H, d) and,
    with return_lse, lse (B, H, N)."""
    qkv = check_qkvpacked(qkv, 5)
    kpm = check_key_padding_mask(key_padding_mask, qkv, qkv)
    out, lse = attention_call(qkv, None, None, dropout_p, softmax_scale, causal, kpm,
                              deterministic=deterministic)
    return (out, lse) if return_lse else out


def _check_cu_seqlens(name, cu, total, device):
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must be a 1-D tensor of batch + 1 offsets")
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device}, expected {device}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {cu.dtype}")
    last = int(cu[-1])
    if last != total:
        raise ValueError(f"{name}[-1] = {last} must equal the number of packed tokens ({total})")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, return_lse=False,
                           deterministic=False):
    """Attention over packed variable-length sequences: q (total_q, Hq, d), k/v (total_k, Hkv, d).

    Sequence b spans rows cu_seqlens[b]:cu_seqlens[b+1] (int32). lse is (Hq, total_q).
    """
    q, k, v = check_qkv(q, k, v, 3)
    _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device)
    _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device)
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError("cu_seqlens_q and cu_seqlens_k must describe the same number of sequences")
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, None,
                              cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                              deterministic=deterministic)
    return (out, lse) if return_lse else out


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, return_lse=False,
                                     deterministic=False):
    """flash_attn_varlen_func over packed variable-length sequences whose q, k, v are packed in
    one tensor qkv (total, 3, H, d): no copies of q, k, v, one packed gradient."""
    qkv = check_qkvpacked(qkv, 4)
    _check_cu_seqlens("cu_seqlens", cu_seqlens, qkv.shape[0], qkv.device)
    out, lse = attention_call(qkv, None, None, dropout_p, softmax_scale, causal, None,
                              cu_seqlens, cu_seqlens, int(max_seqlen), int(max_seqlen),
                              deterministic=deterministic)
    return (out, lse) if return_lse else out


def flash_attn_forward(q, k, v, softmax_scale=None, causal=False, block_m=None, block_n=None):
    """Forward pass only, optionally with explicit tile sizes (block-size sweeps); (out, lse)."""
    q, k, v = check_qkv(q, k, v, 4)
    prob = _Problem(q, k, _scale(softmax_scale, q.shape[-1]), bool(causal), None, None, None,
                    None, None, 0.0, None, None)
    config = dict(tuning.forward_config(prob.block_d, prob.causal, seqlen_q=prob.seqlen_q))
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is None:
            continue
        if value < 16 or value > 256 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two in [16, 256], got {value}")
        config["BLOCK_M" if name == "block_m" else "BLOCK_N"] = value
    with torch.no_grad():
        return _forward(q, k, v, prob, config)


def dropout_mask(batch, heads, seqlen_q, seqlen_k, dropout_p, seed, device="cuda"):
    """The keep-mask (B, H, Nq, Nk) bool that a call with this seed applies (for tests/debugging)."""
    _check_dropout(dropout_p)
    mask = torch.empty(batch * heads, seqlen_q, seqlen_k, dtype=torch.int8, device=device)
    grid = (_cdiv(seqlen_q, 32), _cdiv(seqlen_k, 32), batch * heads)
    seed = torch.tensor([int(seed)], dtype=torch.int64, device=device)
    _dropout_mask_kernel[grid](mask, seqlen_q, seqlen_k, float(dropout_p), seed,
                               BLOCK_M=32, BLOCK_N=32)
    return mask.view(batch, heads, seqlen_q, seqlen_k).bool()
