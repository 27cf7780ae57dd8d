"""One LAMB step over many tensors in two Triton kernels.

LAMB (You et al. 2019) updates Adam's moments, forms u = m_hat / (sqrt(v_hat) + eps) + wd * w and
moves each tensor by lr * (||w|| / ||u||) * u. Written with multi-tensor (foreach) ops it passes
over the parameters about 14 times: 31 reads and writes of a parameter-sized float32 array. Here
the first kernel updates m and v and writes each chunk's partial sums of w^2 and u^2; the second
sums its tensor's partials in a fixed order (so the step is deterministic), recomputes u from the
new moments and applies it: 10 reads and writes. Programs find their tensors through a table of
addresses (parameter, gradient, m, v), so one launch covers every tensor of a group.
"""
import torch
import triton
import triton.language as tl

from kernels.torch_ops import interpreting

# elements per program and per vector step; the interpreter gets small ones so that CPU tests
# cross chunk boundaries with small tensors
_CHUNK, _BLOCK, _PARTIAL_BLOCK = (256, 64, 16) if interpreting() else (32768, 1024, 1024)


@triton.jit
def _direction(w, m, v, bias1, bias2, eps, weight_decay):
    """LAMB's update direction u before the trust ratio."""
    return tl.div_rn(tl.div_rn(m, bias1), tl.sqrt_rn(tl.div_rn(v, bias2)) + eps) + weight_decay * w


@triton.jit
def _chunk(ADDRS, CHUNK_TENSOR, CHUNK_START, NUMEL, GRAD_DTYPE: tl.constexpr):
    """(tensor index, first element, numel, w, grad, m, v pointers) of this program's chunk."""
    c = tl.program_id(0)
    t = tl.load(CHUNK_TENSOR + c)
    start = tl.load(CHUNK_START + c)
    numel = tl.load(NUMEL + t)
    w = tl.load(ADDRS + 4 * t).to(tl.pointer_type(tl.float32))
    g = tl.load(ADDRS + 4 * t + 1).to(tl.pointer_type(GRAD_DTYPE))
    m = tl.load(ADDRS + 4 * t + 2).to(tl.pointer_type(tl.float32))
    v = tl.load(ADDRS + 4 * t + 3).to(tl.pointer_type(tl.float32))
    return t, start, numel, w, g, m, v


@triton.jit
def _lamb_moments_kernel(ADDRS, CHUNK_TENSOR, CHUNK_START, NUMEL, PARTIALS,
                         beta1, beta2, bias1, bias2, eps, weight_decay,
                         GRAD_DTYPE: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    t, start, numel, w_ptr, g_ptr, m_ptr, v_ptr = _chunk(ADDRS, CHUNK_TENSOR, CHUNK_START, NUMEL,
                                                         GRAD_DTYPE)
    w_sq = tl.zeros([BLOCK], dtype=tl.float32)
    u_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, CHUNK, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        ok = offs < numel
        w = tl.load(w_ptr + offs, mask=ok, other=0.0)
        g = tl.load(g_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        m = beta1 * tl.load(m_ptr + offs, mask=ok, other=0.0) + (1.0 - beta1) * g
        v = beta2 * tl.load(v_ptr + offs, mask=ok, other=0.0) + (1.0 - beta2) * g * g
        tl.store(m_ptr + offs, m, mask=ok)
        tl.store(v_ptr + offs, v, mask=ok)
        u = _direction(w, m, v, bias1, bias2, eps, weight_decay)  # 0 where masked
        w_sq += w * w
        u_sq += u * u
    c = tl.program_id(0)
    tl.store(PARTIALS + 2 * c, tl.sum(w_sq, axis=0))
    tl.store(PARTIALS + 2 * c + 1, tl.sum(u_sq, axis=0))


@triton.jit
def _lamb_apply_kernel(ADDRS, CHUNK_TENSOR, CHUNK_START, NUMEL, FIRST_CHUNK, PARTIALS,
                       lr, bias1, bias2, eps, weight_decay,
                       GRAD_DTYPE: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                       PARTIAL_BLOCK: tl.constexpr):
    t, start, numel, w_ptr, g_ptr, m_ptr, v_ptr = _chunk(ADDRS, CHUNK_TENSOR, CHUNK_START, NUMEL,
                                                         GRAD_DTYPE)
    first = tl.load(FIRST_CHUNK + t)
    end = tl.load(FIRST_CHUNK + t + 1)
    w_sq = tl.zeros([PARTIAL_BLOCK], dtype=tl.float32)
    u_sq = tl.zeros([PARTIAL_BLOCK], dtype=tl.float32)
    for j in range(first, end, PARTIAL_BLOCK):
        idx = j + tl.arange(0, PARTIAL_BLOCK)
        w_sq += tl.load(PARTIALS + 2 * idx, mask=idx < end, other=0.0)
        u_sq += tl.load(PARTIALS + 2 * idx + 1, mask=idx < end, other=0.0)
    w_norm = tl.sqrt_rn(tl.sum(w_sq, axis=0))
    u_norm = tl.sqrt_rn(tl.sum(u_sq, axis=0))
    trust = tl.where((w_norm > 0) & (u_norm > 0), tl.div_rn(w_norm, u_norm), 1.0)
    step = lr * trust
    for i in range(0, CHUNK, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        ok = offs < numel
        w = tl.load(w_ptr + offs, mask=ok, other=0.0)
        m = tl.load(m_ptr + offs, mask=ok, other=0.0)
        v = tl.load(v_ptr + offs, mask=ok, other=0.0)
        tl.store(w_ptr + offs, w - step * _direction(w, m, v, bias1, bias2, eps, weight_decay),
                 mask=ok)


_CHUNK_TABLES = {}  # (device, numels) -> (chunk_tensor, chunk_start, numel, first_chunk)


def _chunk_tables(numels, device):
    """Per-chunk tensor index and first element, per-tensor numel and first chunk, on `device`
    (built once per list of tensor sizes)."""
    key = (device, numels)
    if key not in _CHUNK_TABLES:
        numel = torch.tensor(numels, dtype=torch.int64)
        counts = (numel + _CHUNK - 1) // _CHUNK
        first = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
        chunk_tensor = torch.repeat_interleave(torch.arange(len(numels)), counts)
        chunk_start = (torch.arange(int(first[-1])) - first[chunk_tensor]) * _CHUNK
        _CHUNK_TABLES[key] = tuple(x.to(device) for x in (chunk_tensor, chunk_start, numel, first))
    return _CHUNK_TABLES[key]


_TRITON_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


_ADDRESS_TABLES = {}  # (device, addresses) -> the addresses as a tensor on that device


def _address_table(tensor_lists, device):
    """The (w, grad, m, v) addresses of each tensor as an int64 tensor on `device`. Gradients
    reallocated every step mostly come back at the same addresses, so tables are kept and reused;
    a new one is copied from pinned memory without a host sync."""
    addrs = tuple(t.data_ptr() for group in zip(*tensor_lists) for t in group)
    key = (device, addrs)
    if key not in _ADDRESS_TABLES:
        if len(_ADDRESS_TABLES) >= 16:
            _ADDRESS_TABLES.clear()
        table = torch.tensor(addrs, dtype=torch.int64)
        if device.type != "cpu":
            table = table.pin_memory().to(device, non_blocking=True)
        _ADDRESS_TABLES[key] = table
    return _ADDRESS_TABLES[key]


def supports(params, grads, exp_avgs, exp_avg_sqs):
    """Whether `lamb_step` takes these lists on a GPU: contiguous float32 parameters and moments on
    one CUDA device, dense contiguous gradients of one 16- or 32-bit float dtype. (It runs on CPU
    tensors too, under the interpreter, for tests.)"""
    device = params[0].device
    grad_dtype = grads[0].dtype
    if device.type != "cuda" or grad_dtype not in _TRITON_DTYPES:
        return False
    return all(w.dtype == m.dtype == v.dtype == torch.float32 and g.dtype == grad_dtype
               and g.layout == torch.strided
               and w.device == g.device == m.device == v.device == device
               and w.is_contiguous() and g.is_contiguous() and m.is_contiguous()
               and v.is_contiguous() for w, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs))


def lamb_step(params, grads, exp_avgs, exp_avg_sqs, lr, betas, eps, weight_decay, step):
    """One LAMB step in place on lists that `supports` takes; `step` counts this one (1 first),
    shared by every tensor (its bias corrections)."""
    device = params[0].device
    chunk_tensor, chunk_start, numel, first = _chunk_tables(tuple(w.numel() for w in params),
                                                            device)
    addrs = _address_table((params, grads, exp_avgs, exp_avg_sqs), device)
    partials = torch.empty(2 * chunk_tensor.numel(), dtype=torch.float32, device=device)
    beta1, beta2 = betas
    bias1, bias2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    grid = (chunk_tensor.numel(),)
    common = dict(GRAD_DTYPE=_TRITON_DTYPES[grads[0].dtype], CHUNK=_CHUNK, BLOCK=_BLOCK,
                  num_warps=4)
    _lamb_moments_kernel[grid](addrs, chunk_tensor, chunk_start, numel, partials,
                               float(beta1), float(beta2), bias1, bias2, float(eps),
                               float(weight_decay), **common)
    _lamb_apply_kernel[grid](addrs, chunk_tensor, chunk_start, numel, first, partials,
                             float(lr), bias1, bias2, float(eps), float(weight_decay),
                             PARTIAL_BLOCK=_PARTIAL_BLOCK, **common)
