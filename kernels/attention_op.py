"""FlashAttention as a torch op with autograd: the op's argument list is declared once
(`OpInputs`); the op schemas, their shape functions and the autograd bookkeeping derive from it.

Eager calls go through a plain autograd Function (a custom op's dispatch costs host time, about
as much as a short kernel); traced calls and dispatch modes (torch.compile, make_fx, FLOP
counters) see the op. `attention_call` is the entry of the user-facing functions in
kernels/flash_attn.py and kernels/blocksparse.py.
"""
import inspect
from operator import itemgetter
from typing import List, NamedTuple, Optional, Tuple, get_type_hints

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from kernels.attention_inputs import check_dropout, resolve_scale
from kernels.attention_launch import AttentionProblem, SparseLists, backward, forward
from kernels.torch_ops import interpreting, kernel_op


class OpInputs(NamedTuple):
    """The attention op's arguments, in order. k and v None: q is a packed qkv (..., 3, H, d).
    sparse: the six CSR block lists of a block-sparse call at `block` tokens per block (empty for
    a dense call); window_left, window_right: a sliding window's sides (-1 = unbounded);
    deterministic is read by the backward only."""

    q: torch.Tensor
    k: Optional[torch.Tensor]
    v: Optional[torch.Tensor]
    seed: Optional[torch.Tensor]
    kpm: Optional[torch.Tensor]
    cu_q: Optional[torch.Tensor]
    cu_k: Optional[torch.Tensor]
    sparse: List[torch.Tensor]
    max_q: int
    max_k: int
    block: int
    window_left: int
    window_right: int
    causal: bool
    sm_scale: float
    dropout_p: float
    deterministic: bool


_TYPES = get_type_hints(OpInputs)
# positions of the tensor, tensor-list and other (option) arguments: what autograd saves as
# tensors, flattens into them and keeps aside
_TENSOR_AT = tuple(i for i, t in enumerate(_TYPES.values())
                   if t in (torch.Tensor, Optional[torch.Tensor]))
_LIST_AT = tuple(i for i, t in enumerate(_TYPES.values()) if t == List[torch.Tensor])
_OPTION_AT = tuple(i for i in range(len(OpInputs._fields)) if i not in _TENSOR_AT + _LIST_AT)
_DIFFERENTIABLE = OpInputs._fields.index("seed")  # q, k, v lead: the inputs with gradients
_K_AT = OpInputs._fields.index("k")
_BACKWARD_LEAD = (("do", torch.Tensor), ("o", torch.Tensor), ("lse", torch.Tensor))


def _declare(fn, lead, returns):
    """`fn` (taking *args) with the signature `lead` + OpInputs, from which the op's schema is
    inferred."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(n, kind, annotation=t) for n, t in (*lead, *_TYPES.items())]
    fn.__signature__ = inspect.Signature(params, return_annotation=returns)
    return fn


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


def _problem(args, lead=()):
    """(tensors of `lead` and q, k, v ready for the launchers, the AttentionProblem of `args`)."""
    *lead, q, k, v, kpm, cu_q, cu_k = _fixed_strides(*lead, args.q, args.k, args.v, args.kpm,
                                                     args.cu_q, args.cu_k)
    packed, q, k, v = _unpack(q, k, v)
    sparse = SparseLists(args.block, args.sparse) if args.sparse else None
    problem = AttentionProblem(q, k, sm_scale=args.sm_scale, causal=args.causal,
                               dropout_p=args.dropout_p, seed=args.seed, kpm=kpm, cu_q=cu_q,
                               cu_k=cu_k, max_q=args.max_q, max_k=args.max_k, sparse=sparse,
                               packed=packed, window=(args.window_left, args.window_right))
    return (*lead, q, k, v), problem


def forward_impl(*args, **kwargs):
    """(out, lse) for the op's inputs (OpInputs)."""
    (q, k, v), problem = _problem(OpInputs(*args, **kwargs))
    return forward(q, k, v, problem)


def backward_impl(do, o, lse, *args, **kwargs):
    """[dq, dk, dv], or [dqkv] for a packed qkv, from dO, the forward's (out, lse) and the op's
    inputs."""
    inputs = OpInputs(*args, **kwargs)
    (do, o, q, k, v), problem = _problem(inputs, (do, o))
    return backward(do if do.stride(-1) == 1 else do.contiguous(), q, k, v, o, lse, problem,
                    inputs.deterministic)


def _forward_fake(*args, **kwargs):
    inputs = OpInputs(*args, **kwargs)
    _, q, _, _ = _unpack(inputs.q, inputs.k, inputs.v)
    if inputs.cu_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device), lse


def _backward_fake(do, o, lse, *args, **kwargs):
    inputs = OpInputs(*args, **kwargs)
    return [torch.empty_like(x) for x in (inputs.q, inputs.k, inputs.v) if x is not None]


_declare(forward_impl, (), Tuple[torch.Tensor, torch.Tensor])
_declare(backward_impl, _BACKWARD_LEAD, List[torch.Tensor])
forward_op = kernel_op("fa_train::flash_attn_fwd")(forward_impl)
backward_op = kernel_op("fa_train::flash_attn_bwd")(backward_impl)
if interpreting():  # shape functions for the plain custom ops; a triton_op traces its own body
    forward_op.register_fake(_forward_fake)
    backward_op.register_fake(_backward_fake)


_tensors_of = itemgetter(*_TENSOR_AT)
_options_of = itemgetter(*_OPTION_AT)


def _save_for_backward(ctx, inputs, output):
    lists = [inputs[i] for i in _LIST_AT]
    ctx.save_for_backward(*output, *_tensors_of(inputs), *(t for x in lists for t in x))
    ctx.list_lengths = [len(x) for x in lists]
    ctx.options = _options_of(inputs)
    ctx.mark_non_differentiable(output[1])


def _gradients(ctx, do, backward_fn):
    """The gradients of q, k, v from the saved tensors through `backward_fn` (the op or its
    plain function): (dqkv, None, None) for a packed qkv."""
    o, lse, *saved = ctx.saved_tensors
    args = [None] * len(OpInputs._fields)
    for i, t in zip(_TENSOR_AT, saved):
        args[i] = t
    rest = len(_TENSOR_AT)
    for i, count in zip(_LIST_AT, ctx.list_lengths):
        args[i], rest = saved[rest:rest + count], rest + count
    for i, x in zip(_OPTION_AT, ctx.options):
        args[i] = x
    grads = backward_fn(do, o, lse, *args)
    return (grads[0], None, None) if args[_K_AT] is None else tuple(grads)


def _op_backward(ctx, do, _dlse):
    # one entry per input past q, k, v: a list of Nones for a list input
    lengths = dict(zip(_LIST_AT, ctx.list_lengths))
    rest = ([None] * lengths[i] if i in lengths else None
            for i in range(_DIFFERENTIABLE, len(OpInputs._fields)))
    return (*_gradients(ctx, do, backward_op), *rest)


forward_op.register_autograd(_op_backward, setup_context=_save_for_backward)


class _EagerAttention(torch.autograd.Function):
    """The same forward and backward for eager calls, without the ops' dispatch: a custom op
    costs about 0.1 ms of host time per call (kernels/NOTES.md), as much as a short kernel."""

    @staticmethod
    def forward(ctx, *inputs):
        output = forward_impl(*inputs)
        _save_for_backward(ctx, inputs, output)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, _dlse):
        return (*_gradients(ctx, do, backward_impl),
                *[None] * (len(OpInputs._fields) - _DIFFERENTIABLE))


def _attention(*inputs):
    """The attention op while a graph is traced or a dispatch mode watches (torch.compile,
    make_fx, tensor subclasses, FLOP counters: the op shows them the call), else the eager
    autograd function."""
    if (torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None
            or type(inputs[0]) is not torch.Tensor):
        return forward_op(*inputs)
    return _EagerAttention.apply(*inputs)


def draw_seed(device):
    """A dropout seed as a (1,) int64 tensor on `device`, from that device's default generator
    (seeded by torch.manual_seed); drawn on the device, so no host synchronization."""
    return torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64, device=device)


def attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm, cu_q=None, cu_k=None,
                   max_q=None, max_k=None, sparse=None, deterministic=False, window=(-1, -1)):
    """Run the attention op (with autograd) for checked inputs; returns (out, lse).

    sparse: a block-sparse index with `block`, `row_lists()` and `col_lists()`, or None.
    window: a checked (left, right) sliding window (`check_window`), (-1, -1) for none.
    deterministic: a backward with no atomics, bitwise reproducible (a dQ pass of its own).
    """
    check_dropout(dropout_p)
    # a tensor, so that compiled graphs need not leave the graph to draw it
    seed = draw_seed(q.device) if dropout_p > 0.0 else None
    lists = [*sparse.row_lists(), *sparse.col_lists()] if sparse is not None else []
    block = sparse.block if sparse is not None else 0
    # in OpInputs order (positional: a NamedTuple built from keywords costs a microsecond more)
    return _attention(q, k, v, seed, kpm, cu_q, cu_k, lists, int(max_q or 0), int(max_k or 0),
                      block, window[0], window[1], bool(causal), resolve_scale(softmax_scale, q.shape[-1]),
                      float(dropout_p), bool(deterministic))
