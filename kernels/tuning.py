"""Tile sizes, warps and pipeline depth for the attention kernels, by head dim and pass.

The GPU table comes from sweeps on an H100 (`research/kernel_probes/tune_attention.py`, notes in
kernels/NOTES.md). The interpreter gets small tiles so that CPU tests stay fast yet still cross
several blocks.
"""
from kernels.torch_ops import interpreting

INTERPRETER_TILE = 32

# How a kernel loads its streamed tiles (the `TMA` launch parameter): pointer loads; TMA copies
# through a tensor descriptor that each program makes (device-side: it costs each program a
# descriptor write and fence, felt where programs walk few tiles); or through descriptors the
# launcher makes on the host, one per tensor, for (batch, seq, heads, d) tensors only
POINTER_LOADS, PROGRAM_DESCRIPTORS, HOST_DESCRIPTORS = 0, 1, 2
TMA_MODES = (POINTER_LOADS, PROGRAM_DESCRIPTORS, HOST_DESCRIPTORS)

# (BLOCK_M, BLOCK_N, num_warps, num_stages) by head-dim bucket; H100 sweeps of 2026-11-22 at
# N = 1024-16384 (kernels/NOTES.md, rounds 1, 13 and 16). Causal calls at d = 128 took 128 x 64
# tiles until round 24's TMA loads made 128 x 128 faster for them too.
_FORWARD = {16: (128, 64, 4, 3), 32: (128, 64, 8, 3), 64: (128, 64, 8, 3), 128: (128, 128, 8, 3)}
# causal calls over short sequences: smaller query blocks give more programs and less masked work
# on the diagonal (round 16)
SHORT_SEQLEN = 2048
_FORWARD_CAUSAL_SHORT = {64: (64, 64, 4, 3), 128: (64, 64, 4, 3)}
# dK/dV, causal or not, dense or block-sparse, with or without dQ atomics (re-swept at d = 128 after
# round 22 made its loop leaner: 3 stages, not 2, without a causal mask)
_DKDV = {16: (64, 64, 4, 3), 32: (64, 64, 4, 3), 64: (64, 64, 4, 3), 128: (64, 128, 8, 3)}
_DQ = {16: (128, 64, 8, 3), 32: (128, 64, 8, 3), 64: (128, 64, 8, 3), 128: (128, 64, 8, 4)}
# what block-sparse calls change (few tiles per row; tiles fit in the layout blocks): H100 sweeps
# over butterfly layouts at N = 4K and 16K (kernels/NOTES.md, rounds 12 and 13); 128 x 64 forward
# tiles at d = 64, faster over plain butterfly layouts, lost up to 1.2x with dropout or a global
# block (round 26)
_FORWARD_SPARSE = {64: (64, 64, 4, 3), 128: (64, 64, 4, 3)}
# block-sparse forward calls at d = 128 over layouts of 128-token blocks whose block rows list
# LONG_ROW_BLOCKS blocks or more on average, without causal mask or dropout: 128 x 128 tiles,
# 1.05-1.17x over 64 x 64 from 5 blocks per row (round 28; 0.96-0.99x at 3 blocks per row and in
# causal calls with dropout)
LONG_ROW_BLOCKS = 4
_FORWARD_SPARSE_LONG_ROWS = {128: (128, 128, 8, 3)}
_DQ_SPARSE = {64: (64, 64, 4, 3)}
# head-dim buckets whose dense kernels load their streamed tiles (K and V in the forward and dQ
# passes, Q and dO in the dK/dV pass) through per-program descriptors: H100 A/Bs of round 24
# (host descriptors measured level in the forward and slower in the backward in round 26), forward
# 1.07-1.14x at d = 128 without a causal mask (level with one; slower at d = 64 and with the short
# causal tiles); backward 1.03-1.09x at d = 64 from N = 4K, without dQ atomics (slower at N = 1K,
# at d = 128 and with atomics)
_TMA_FORWARD = {128}
_TMA_BACKWARD = {64}
# block-sparse forward calls through the launcher's descriptors: H100 A/Bs of round 26 (butterfly
# layouts, 64K tokens per call), 1.13-1.14x at d = 128 (per-program descriptors 0.97-1.02x) and
# 0.99-1.08x at d = 64, with or without dropout, a global block or a causal mask
_HOST_TMA_FORWARD_SPARSE = {64, 128}
# sliding windows that let a query see at most NARROW_WINDOW keys, without dropout: smaller query
# blocks waste fewer masked scores at the window's edges (a block visits about BLOCK_M + span
# keys); H100 sweep at W = 256 each side, N = 8K (round 31): forward 1.30-1.63x, dK/dV 1.0-1.23x,
# dQ 1.09-1.19x over the dense tiles, pointer loads
NARROW_WINDOW = 1024
_FORWARD_WINDOW = {64: (64, 32, 4, 3), 128: (64, 32, 4, 3)}
_DKDV_WINDOW = {128: (32, 64, 4, 3)}
_DQ_WINDOW = {64: (64, 32, 4, 3), 128: (64, 64, 4, 2)}


def _narrow(window_span, dropout, sparse):
    """Whether a call takes the narrow-window tiles: dense, a narrow window, no dropout."""
    return 0 < window_span <= NARROW_WINDOW and not (dropout or sparse)


def _bucket(block_d):
    return min(max(block_d, 16), 128)


def _config(table, block_d, tma=POINTER_LOADS):
    block_m, block_n, warps, stages = table[_bucket(block_d)]
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages,
            "TMA": tma}


def _interpreter_config():
    tile = INTERPRETER_TILE
    return {"BLOCK_M": tile, "BLOCK_N": tile, "num_warps": 4, "num_stages": 1,
            "TMA": POINTER_LOADS}


def forward_config(block_d, causal, sparse=False, seqlen_q=None, dropout=False, layout_block=0,
                   row_blocks=0.0, window_span=0):
    """Launch parameters of the forward kernel (sparse: of a block-sparse call, over a layout of
    `layout_block` tokens per block whose block rows list `row_blocks` blocks on average; seqlen_q:
    query length, which picks smaller tiles for short causal calls; dropout: whether the call
    drops; window_span: keys a query of a sliding-window call sees at most, 0 for none). TMA: how
    the kernel loads K and V, one of TMA_MODES (the launcher also checks that the tensors allow
    descriptors)."""
    if interpreting():
        return _interpreter_config()
    if _narrow(window_span, dropout, sparse):
        return _config({**_FORWARD, **_FORWARD_WINDOW}, block_d)
    table = _FORWARD
    short = causal and seqlen_q is not None and seqlen_q <= SHORT_SEQLEN
    if short:
        table = {**table, **_FORWARD_CAUSAL_SHORT}
    if sparse:
        host = _bucket(block_d) in _HOST_TMA_FORWARD_SPARSE
        table = {**table, **_FORWARD_SPARSE}
        if layout_block >= 128 and row_blocks >= LONG_ROW_BLOCKS and not (causal or dropout):
            table.update(_FORWARD_SPARSE_LONG_ROWS)
        return _config(table, block_d, HOST_DESCRIPTORS if host else POINTER_LOADS)
    tma = _bucket(block_d) in _TMA_FORWARD and not short
    return _config(table, block_d, PROGRAM_DESCRIPTORS if tma else POINTER_LOADS)


def atomic_dq(dropout_p, block_d):
    """Whether a backward allowed to be non-deterministic adds dQ with float32 atomics inside the
    dK/dV pass instead of running a dQ pass. H100 sweeps (kernels/NOTES.md, rounds 11 and 23):
    with dropout at d <= 64 1.1-1.3x faster (the mask is regenerated once, not twice); without
    dropout, or at d = 128 since the dQ pass draws its mask without exchanges, slower."""
    return dropout_p > 0 and block_d <= 64


def backward_configs(block_d, atomic=False, sparse=False, seqlen_q=None, dropout=False,
                     window_span=0):
    """Launch parameters of the dK/dV kernel (atomic: the one that also adds dQ) and of the dQ
    kernel (sparse: of a block-sparse call; seqlen_q: query length, None for unknown; dropout and
    window_span, TMA as in `forward_config`)."""
    if interpreting():
        return _interpreter_config(), _interpreter_config()
    if atomic:
        return _config(_DKDV, block_d), None
    if _narrow(window_span, dropout, sparse):
        return (_config({**_DKDV, **_DKDV_WINDOW}, block_d),
                _config({**_DQ, **_DQ_WINDOW}, block_d))
    if sparse:
        return _config(_DKDV, block_d), _config({**_DQ, **_DQ_SPARSE}, block_d)
    tma = bool(_bucket(block_d) in _TMA_BACKWARD and seqlen_q is not None
               and seqlen_q > SHORT_SEQLEN)  # a plain bool where seqlen_q is symbolic
    tma = PROGRAM_DESCRIPTORS if tma else POINTER_LOADS
    return _config(_DKDV, block_d, tma), _config(_DQ, block_d, tma)
