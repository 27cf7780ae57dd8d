"""Cross entropy of a language-model head, fused: logits = h @ weight.T, one Triton pass per row.

PyTorch's loss reads the logits for the log-softmax, then reads them again and writes their
gradient in the backward pass, with float32 copies in between. Here a kernel computes each row's
log-sum-exp and loss in one read and, when a gradient is needed, overwrites the logits with
softmax - one_hot in the same program, reading the row backwards so that its last blocks still come
from L2: the logits are read at most twice and written once, in their own dtype. The backward pass
multiplies that buffer into the two gradients (h and weight) and only then scales them by
d(loss) / (number of counted targets), so the stored values stay in [-1, 1], safe in float16.
"""
from typing import Tuple

import torch
import triton
import triton.language as tl

from kernels.torch_ops import check_kernel_input, interpreting, kernel_op, traceable


@triton.jit
def _cross_entropy_kernel(LOGITS, TARGETS, LOSS, stride_row, vocab_size, n_cols, ignore_index,
                          BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr):
    """Row `program_id`: LOSS = logsumexp(logits[:vocab_size]) - logits[target] (0 when the
    target is ignore_index, NaN when it lies outside the vocabulary); with WRITE_GRAD the row
    becomes softmax - one_hot(target) (zero in padding columns and in ignored rows)."""
    row = tl.program_id(0).to(tl.int64)
    base = LOGITS + row * stride_row
    target = tl.load(TARGETS + row)
    offs = tl.arange(0, BLOCK)
    # online log-sum-exp, kept per lane and combined at the end
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab_size, BLOCK):
        cols = start + offs
        x = tl.load(base + cols, mask=cols < vocab_size, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    m_row = tl.max(m, 0)
    lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row), 0))

    ignored = target == ignore_index
    in_vocab = (target >= 0) & (target < vocab_size)
    target_logit = tl.load(base + target, mask=in_vocab, other=0.0).to(tl.float32)
    loss = tl.where(in_vocab, lse - target_logit, float("nan"))
    tl.store(LOSS + row, tl.where(ignored, 0.0, loss))
    if WRITE_GRAD:  # last block first: the blocks read most recently are the likeliest in L2
        n_blocks = tl.cdiv(n_cols, BLOCK)
        for i in range(0, n_blocks):
            cols = (n_blocks - 1 - i) * BLOCK + offs
            x = tl.load(base + cols, mask=cols < vocab_size, other=float("-inf")).to(tl.float32)
            grad = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)
            grad = tl.where(ignored, 0.0, grad)
            tl.store(base + cols, grad.to(LOGITS.dtype.element_ty), mask=cols < n_cols)


def _config():
    if interpreting():
        return {"BLOCK": 64, "num_warps": 4}
    return {"BLOCK": 4096, "num_warps": 8}


def _linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          vocab_size: int, ignore_index: int,
                          with_grad: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(summed loss over counted targets, float32 scalar; the logits' gradient softmax -
    one_hot, (tokens, weight rows), or an empty tensor without `with_grad`)."""
    logits = h @ weight.t()
    losses = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
    traceable(_cross_entropy_kernel, h)[(h.shape[0],)](
        logits, targets, losses, logits.stride(0), vocab_size, logits.shape[1], ignore_index,
        WRITE_GRAD=with_grad, **_config())
    return losses.sum(), logits if with_grad else logits.new_empty(0)


_linear_cross_entropy_op = kernel_op("fa_train::linear_cross_entropy")(_linear_cross_entropy)
if interpreting():
    @_linear_cross_entropy_op.register_fake
    def _(h, weight, targets, vocab_size, ignore_index, with_grad):
        grad_shape = (h.shape[0], weight.shape[0]) if with_grad else (0,)
        return h.new_empty((), dtype=torch.float32), h.new_empty(grad_shape)


def _setup_context(ctx, inputs, output):
    h, weight = inputs[:2]
    ctx.save_for_backward(h, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, d_total, _d_grad):
    """Gradients of h and weight: (softmax - one_hot) times weight or h, scaled in float32."""
    h, weight, grad_logits = ctx.saved_tensors
    grad_h = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_h = ((grad_logits @ weight).float() * d_total).to(h.dtype)
    if ctx.needs_input_grad[1]:
        grad_w = ((grad_logits.t() @ h).float() * d_total).to(weight.dtype)
    return grad_h, grad_w, None, None, None, None


_linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)


def _check(h, weight, targets, vocab_size):
    for name, x in (("h", h), ("weight", weight)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        check_kernel_input(name, x)
    if weight.dtype != h.dtype:
        raise TypeError(f"weight ({weight.dtype}) and h ({h.dtype}) must share a dtype")
    if weight.shape[1] != h.shape[1]:
        raise ValueError(f"weight has {weight.shape[1]} columns but h has {h.shape[1]} features")
    if not isinstance(targets, torch.Tensor) or targets.shape != h.shape[:1]:
        raise ValueError(f"targets must have shape ({h.shape[0]},), one per row of h, got "
                         f"{tuple(targets.shape) if isinstance(targets, torch.Tensor) else targets}")
    if targets.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"targets must hold integer class indices, got {targets.dtype}")
    if targets.device != h.device or weight.device != h.device:
        raise ValueError(f"h, weight and targets must be on one device, got {h.device}, "
                         f"{weight.device}, {targets.device}")
    if not 1 <= vocab_size <= weight.shape[0]:
        raise ValueError(f"vocab_size must be in [1, {weight.shape[0]}] (rows of weight), "
                         f"got {vocab_size}")


def linear_cross_entropy(h, weight, targets, vocab_size=None, ignore_index=-100):
    """Mean cross entropy of the logits h @ weight.T against `targets`, without a float32 copy of
    the logits: ``F.cross_entropy((h @ weight.T)[:, :vocab_size].float(), targets,
    ignore_index=ignore_index)``, differentiable in h and weight.

    h (tokens, features) and weight (rows, features) share a dtype (cast them first under
    autocast); rows of weight beyond `vocab_size` (default: all) are padding and never predicted.
    targets (tokens,) are class indices; those equal to ignore_index do not count; one outside
    [0, vocab_size) makes the loss NaN. Like PyTorch, the mean over no counted target is NaN.
    """
    vocab_size = weight.shape[0] if vocab_size is None else vocab_size
    _check(h, weight, targets, vocab_size)
    with_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    total, _ = _linear_cross_entropy_op(h.contiguous(), weight.contiguous(), targets.contiguous(),
                                        vocab_size, ignore_index, with_grad)
    return total / (targets != ignore_index).sum()
