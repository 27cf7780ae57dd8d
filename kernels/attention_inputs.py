"""Checks of the attention functions' arguments: one clear error naming the argument."""
import math

import torch

from kernels.torch_ops import check_kernel_input

MAX_HEAD_DIM = 128

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


def check_dropout(dropout_p):
    """A clear error for a dropout probability outside [0, 1) (or not a number)."""
    try:
        ok = 0.0 <= dropout_p < 1.0
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")


def check_window(window_size, causal):
    """A sliding window (left, right) of ints >= -1 (-1 = unbounded), as a tuple; with causal the
    right side is the diagonal, so it is given as -1. One clear error otherwise."""
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)):
        raise ValueError(f"window_size must be a pair (left, right) of ints, got {window_size!r}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"window_size sides must be >= -1 (-1 = unbounded), got {window_size!r}")
    return (left, -1) if causal else (left, right)


def resolve_scale(softmax_scale, head_dim):
    """The softmax scale: 1 / sqrt(head_dim) unless given; a given one must be a finite number."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    try:
        scale = float(softmax_scale)
    except (TypeError, ValueError):
        scale = math.nan
    if not math.isfinite(scale):
        raise ValueError(f"softmax_scale must be a finite number, got {softmax_scale!r}")
    return scale


def check_key_padding_mask(key_padding_mask, q, k):
    """Validate a (batch, seqlen_k) bool mask; return it as uint8 for the kernels (or None)."""
    if key_padding_mask is None:
        return None
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.is_floating_point():
        got = getattr(key_padding_mask, "dtype", type(key_padding_mask).__name__)
        raise TypeError(f"key_padding_mask must be a bool tensor (True = keep), got {got}")
    expected = (q.shape[0], k.shape[1])
    if tuple(key_padding_mask.shape) != expected:
        raise ValueError(f"key_padding_mask must have shape (batch, seqlen_k) = {expected}, "
                         f"got {tuple(key_padding_mask.shape)}")
    if key_padding_mask.device != q.device:
        raise ValueError(f"key_padding_mask is on {key_padding_mask.device}, q on {q.device}")
    return key_padding_mask.to(torch.uint8).contiguous()


def check_cu_seqlens(name, cu, total, device, max_seqlen):
    """Validate int32 offsets `cu` of packed sequences holding `total` tokens on `device`, none
    longer than `max_seqlen`. Offsets in host memory are checked whole; on a GPU the device checks
    the last one (a host read would wait for the GPU, and split a compiled graph, at every call)."""
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must be a 1-D tensor of batch + 1 offsets")
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device}, expected {device}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {cu.dtype}")
    if cu.device.type != "cpu":  # asserted by the device itself: no host read, no graph break
        torch._assert_async(cu[-1] == total,
                            f"{name}[-1] must equal the number of packed tokens (rows of q, k, v)")
        return
    offsets = cu.tolist()
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    if offsets[0] != 0 or min(lengths) < 0:
        raise ValueError(f"{name} must start at 0 and never decrease, got {offsets}")
    if offsets[-1] != total:
        raise ValueError(f"{name}[-1] = {offsets[-1]} must equal the number of packed tokens "
                         f"({total})")
    longest = max(lengths)
    if longest > max_seqlen:
        raise ValueError(f"max_seqlen = {max_seqlen} is below the longest sequence of {name} "
                         f"({longest})")
