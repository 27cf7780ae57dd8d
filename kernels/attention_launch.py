"""FlashAttention's host launchers: the problem description of one call and the functions that
launch the kernels of kernels/attention_kernels.py for it.

`AttentionProblem(q, k, sm_scale=..., causal=..., ...)` describes a call (keyword arguments after
q and k); `forward(q, k, v, problem, config=None)` returns (out, lse) and `backward(do, q, k, v,
o, lse, problem, ...)` the gradients. `config` (and `configs` for the backward's dK/dV and dQ
passes) overrides the tile table of kernels/tuning.py, for sweeps and probes; `launch_kernel`
launches one kernel, with fewer pipeline stages where shared memory runs out.
"""
import torch
import triton
from torch.fx.experimental.symbolic_shapes import statically_known_true
from triton.runtime import _allocation
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels import tuning
from kernels.attention_kernels import (bwd_dkdv_kernel, bwd_dq_kernel, bwd_row_stats_kernel,
                                       fwd_kernel)
from kernels.torch_ops import traceable

LOG2E = 1.4426950408889634
# what the kernels get for an unbounded side of a sliding window: wider than any sequence, and
# small enough that a position plus it stays an int32
UNBOUNDED_WINDOW = 1 << 30


def block_d_for(head_dim):
    """Register tile width for a head dim: the next power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def cdiv(a, b):
    """ceil(a / b) in plain Python: triton.cdiv is a constexpr function whose host calls cost
    microseconds each, several per attention call."""
    return (a + b - 1) // b


def _strides(x, varlen):
    """(batch, seq, head) strides of a (B, N, H, d) tensor or a packed (total, H, d) one."""
    s = x.stride()
    return (0, s[0], s[1]) if varlen else s[:3]


class AttentionProblem:
    """Shapes and options of one attention call, shared by the forward and backward launchers.

    q, k: the query and key tensors (B, N, H, d), or (total, H, d) with cu_q and cu_k (int32
    offsets of packed sequences, max_q and max_k their longest lengths); sm_scale: the softmax
    scale; seed: (1,) int64 on the device with dropout, else None; kpm: (B, Nk) uint8 key-padding
    mask or None; sparse: block lists with `block`, `row_lists()` and `col_lists()` (a
    `kernels.BlockSparseIndex` or `SparseLists`) or None; packed: the packed qkv whose views q and
    k are, or None; window: (left, right) keys each side of the (bottom-right aligned) diagonal
    that a query sees, -1 = unbounded (causal bounds the right side at 0).
    """

    def __init__(self, q, k, *, sm_scale, causal=False, dropout_p=0.0, seed=None, kpm=None,
                 cu_q=None, cu_k=None, max_q=0, max_k=0, sparse=None, packed=None,
                 window=(-1, -1)):
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
        self.seed = seed
        self.kpm, self.cu_q, self.cu_k, self.sparse = kpm, cu_q, cu_k, sparse
        self.kpm_stride = kpm.stride(0) if kpm is not None else 0
        # A bounded window gets kernels compiled with WINDOW, which carry the causal bound as
        # its right side; calls without one compile no window code at all.
        left, right = window
        self.windowed = left >= 0 or (right >= 0 and not causal)
        self.window_args = (0, 0)
        if self.windowed:
            self.window_args = (left if left >= 0 else UNBOUNDED_WINDOW,
                                0 if causal else (right if right >= 0 else UNBOUNDED_WINDOW))
        # keys a query sees at most (0: no window, or a side unbounded), which picks tiles
        self.window_span = (sum(self.window_args) + 1
                            if self.windowed and max(self.window_args) < UNBOUNDED_WINDOW else 0)

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
        return dict(HEAD_DIM=self.head_dim, BLOCK_D=self.block_d,
                    IS_CAUSAL=self.causal and not self.windowed, HAS_KPM=self.kpm is not None,
                    VARLEN=self.varlen, SPARSE=self.sparse is not None,
                    DROPOUT=self.dropout_p > 0.0, PACKED=self.packed is not None,
                    WINDOW=self.windowed)

    def tma_ready(self, *tensors):
        """Whether a kernel may load these tensors' tiles through TMA descriptors: aligned, and
        head dims that fill the tile (the ones measured)."""
        return self.head_dim == self.block_d and all(tma_aligned(t) for t in tensors)

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


def tma_aligned(t):
    """Whether TMA descriptors can address tensor t: 16-byte aligned start and strides. Tensors
    traced by a compiled graph have no address; their allocations are aligned, so their offset
    decides, and a symbolic size counts as aligned only where that holds for every value."""
    start = t.data_ptr() if type(t) is torch.Tensor else t.storage_offset() * t.element_size()
    return all(statically_known_true(x % 16 == 0)
               for x in (start, *(s * t.element_size() for s in t.stride()[:-1])))


def scratch_from_torch(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_scratch_allocator():
    """Kernels that build TMA descriptors need global scratch memory at launch, which Triton
    takes from the allocator set with `triton.set_allocator`; where none was set, take it from
    PyTorch's caching allocator."""
    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(scratch_from_torch)


_STAGE_CAPS = {}  # (kernel, tile config) -> pipeline depth that fit in shared memory


def launch_kernel(kernel, grid, args, config, **flags):
    """Launch `kernel`; if its pipeline does not fit in shared memory, retry with fewer stages."""
    if config.get("TMA") == tuning.PROGRAM_DESCRIPTORS:
        ensure_scratch_allocator()
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


def forward(q, k, v, prob, config=None):
    """(out, lse) of the attention `prob` describes; `config`: tiles instead of the table's."""
    sp = prob.sparse
    config = prob.tiles(config or tuning.forward_config(
        prob.block_d, prob.causal, sp is not None, prob.seqlen_q, prob.dropout_p > 0.0,
        *prob.layout_rows(), prob.window_span), k, v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = prob.lse_buffer(q)
    grid = (cdiv(prob.seqlen_q, config["BLOCK_M"]), prob.batch * prob.heads)
    args = (*prob.inputs(q, k, v), o, lse, prob.kpm, prob.cu_q, prob.cu_k, *prob.lists(rows=True),
            *_strides(q, prob.varlen), *_strides(k, prob.varlen), *_strides(v, prob.varlen),
            prob.slot_stride, *_strides(o, prob.varlen), *prob.lse_strides(lse),
            prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads, prob.group,
            *prob.window_args, prob.sm_scale * LOG2E, prob.dropout_p, prob.seed,
            *_host_descs(config, config["BLOCK_N"], k, v))
    launch_kernel(fwd_kernel, grid, args, config, REVERSE=prob.causal and sp is None,
                  **prob.flags())
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


def backward(do, q, k, v, o, lse, prob, deterministic=True, configs=None, atomic=None):
    """[dq, dk, dv], or [dqkv] for a packed call: a dQ pass (which also writes the row stats) then
    a dK/dV pass; or, where `tuning.atomic_dq` finds it faster and `deterministic` is False, one
    pass whose dK/dV kernel also adds each block's dQ share to a float32 dQ with atomics
    (order-dependent rounding). atomic: force one of the two (sweeps)."""
    if atomic is None:
        atomic = not deterministic and tuning.atomic_dq(prob.dropout_p, prob.block_d)
    configs = configs or tuning.backward_configs(prob.block_d, atomic, prob.sparse is not None,
                                                 prob.seqlen_q, prob.dropout_p > 0.0,
                                                 prob.window_span)
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
        traceable(bwd_row_stats_kernel, o)[(cdiv(prob.seqlen_q, 64), prob.batch * prob.heads)](
            o, do, lse, stats, prob.cu_q, *_strides(o, prob.varlen), *_strides(do, prob.varlen),
            *lse_strides, prob.seqlen_q, prob.heads, HEAD_DIM=prob.head_dim, BLOCK_D=prob.block_d,
            BLOCK_M=64, VARLEN=prob.varlen)
    else:  # the dQ pass writes the row stats, which the dK/dV pass reads
        dq_args = (*inputs, o, do, lse, stats, dq, prob.kpm, prob.cu_q, prob.cu_k,
                   *prob.lists(rows=True), *common,
                   *_strides(o, prob.varlen), *dq_strides, prob.slot_stride, *lse_strides,
                   prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads, prob.group,
                   *prob.window_args, prob.sm_scale, prob.sm_scale * LOG2E, prob.dropout_p,
                   prob.seed,
                   *_host_descs(dq_cfg, dq_cfg["BLOCK_N"], k, v))
        launch_kernel(bwd_dq_kernel, (cdiv(prob.seqlen_q, dq_cfg["BLOCK_M"]),
                                 prob.batch * prob.heads),
                dq_args, dq_cfg, REVERSE=prob.causal and sp is None, **flags)
    dkdv_args = (*inputs, do, stats, dk, dv, dq, prob.kpm, prob.cu_q, prob.cu_k,
                 *prob.lists(rows=False), *common,
                 *dk_strides, *dv_strides, *dq_strides, prob.slot_stride, *lse_strides,
                 prob.kpm_stride, prob.seqlen_q, prob.seqlen_k, prob.heads_kv, prob.group,
                 *prob.window_args, prob.sm_scale, prob.sm_scale * LOG2E, prob.dropout_p,
                 prob.seed,
                 *_host_descs(dkdv_cfg, dkdv_cfg["BLOCK_M"], q, do))
    launch_kernel(bwd_dkdv_kernel, (cdiv(prob.seqlen_k, dkdv_cfg["BLOCK_N"]),
                               prob.batch * prob.heads_kv), dkdv_args, dkdv_cfg,
            ATOMIC_DQ=atomic, **flags)
    if dqkv is None:
        return [dq.to(q.dtype) if atomic else dq, dk, dv]
    if atomic:
        dqkv.select(-3, 0).copy_(dq)
    return [dqkv]


class SparseLists:
    """CSR block lists handed to the kernels: (row_ptr, row_split, col_idx, col_ptr, col_split,
    row_idx) of a layout at `block` tokens per block."""

    def __init__(self, block, lists):
        self.block, self.lists = block, lists

    def row_lists(self):
        return self.lists[:3]

    def col_lists(self):
        return self.lists[3:]
