"""LayerNorm over narrow rows, forward and backward, in Triton: many rows per program.

PyTorch's CUDA LayerNorm gives each row a thread block; over rows of a few dozen features (the
LRA Pathfinder models: d_model 32, a million rows per step) most of its threads idle and the
kernel runs far below memory bandwidth. Here each program normalizes a tile of rows, and the
backward program walks several tiles, keeping its partial sums of the weight and bias gradients
in registers and writing them once. Statistics and arithmetic are float32 whatever the dtype.
"""
import torch
import triton
import triton.language as tl

from kernels.torch_ops import check_kernel_input, interpreting, kernel_op, traceable

MAX_WIDTH = 8192  # features per row: one row must fit one tile
_TILE_ELEMENTS = 256 if interpreting() else 4096  # rows x features per program
_BACKWARD_PROGRAMS = 4 if interpreting() else 1024  # at most, each walking tiles in turn


@triton.jit
def _forward_kernel(X, W, B, Y, MEAN, RSTD, n_rows, n_cols, eps,
                    HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 1) / n_cols
    centered = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, 1) / n_cols + eps)
    y = centered * rstd[:, None]
    if HAS_W:
        y = y * tl.load(W + cols, mask=cols < n_cols, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        y = y + tl.load(B + cols, mask=cols < n_cols, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_ok)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit
def _backward_kernel(X, W, DY, DX, MEAN, RSTD, DW_PARTIAL, DB_PARTIAL, n_rows, n_cols,
                     HAS_W: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """dX of the row tiles pid, pid + programs, ...; this program's column sums of dY * x_hat and
    dY into row pid of DW_PARTIAL and DB_PARTIAL."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    col_ok = cols < n_cols
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_COLS], tl.float32)
    db = tl.zeros([BLOCK_COLS], tl.float32)
    for tile in range(pid, tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0)):
        rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy
        if HAS_W:
            g = dy * w[None, :]
        mean_g = tl.sum(g, 1) / n_cols
        mean_g_x_hat = tl.sum(g * x_hat, 1) / n_cols
        dx = (g - mean_g[:, None] - x_hat * mean_g_x_hat[:, None]) * rstd[:, None]
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * x_hat, 0)
        db += tl.sum(dy, 0)
    tl.store(DW_PARTIAL + pid * n_cols + cols, dw, mask=col_ok)
    tl.store(DB_PARTIAL + pid * n_cols + cols, db, mask=col_ok)


def _tile(n_cols):
    """(BLOCK_ROWS, BLOCK_COLS, num_warps) for rows of n_cols features."""
    block_cols = triton.next_power_of_2(n_cols)
    block_rows = max(1, _TILE_ELEMENTS // block_cols)
    return block_rows, block_cols, 4 if block_rows * block_cols <= 4096 else 8


def _forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
             out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of x (rows, features); y in out_dtype, the statistics float32."""
    n_rows, n_cols = x.shape
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    block_rows, block_cols, warps = _tile(n_cols)
    traceable(_forward_kernel, x)[(triton.cdiv(n_rows, block_rows),)](
        x, weight, bias, y, mean, rstd, n_rows, n_cols, eps,
        HAS_W=weight is not None, HAS_B=bias is not None,
        BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=warps)
    return y, mean, rstd


def _backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
              rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias): dx in x's dtype, the parameter gradients float32 (features,)."""
    n_rows, n_cols = x.shape
    block_rows, block_cols, warps = _tile(n_cols)
    programs = max(1, min(triton.cdiv(n_rows, block_rows), _BACKWARD_PROGRAMS))
    dx = torch.empty_like(x)
    partial = torch.empty((2, programs, n_cols), dtype=torch.float32, device=x.device)
    traceable(_backward_kernel, x)[(programs,)](
        x, weight, dy, dx, mean, rstd, partial[0], partial[1], n_rows, n_cols,
        HAS_W=weight is not None, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=warps)
    return dx, partial[0].sum(0), partial[1].sum(0)


_forward_op = kernel_op("fa_train::layer_norm_forward")(_forward)
_backward_op = kernel_op("fa_train::layer_norm_backward")(_backward)
if interpreting():
    @_forward_op.register_fake
    def _(x, weight, bias, eps, out_dtype):
        stats = x.new_empty(x.shape[0], dtype=torch.float32)
        return x.new_empty(x.shape, dtype=out_dtype), stats, stats.clone()

    @_backward_op.register_fake
    def _(dy, x, weight, mean, rstd):
        grad = x.new_empty(x.shape[1], dtype=torch.float32)
        return torch.empty_like(x), grad, grad.clone()


def _setup_context(ctx, inputs, output):
    x, weight, bias = inputs[:3]
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.mark_non_differentiable(output[1], output[2])


def _grads(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _backward_op(dy.contiguous(), x, weight, mean, rstd)
    return (dx, None if weight is None else dweight.to(weight.dtype),
            None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype), None, None)


_forward_op.register_autograd(_grads, setup_context=_setup_context)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """``F.layer_norm`` over the last dimension through the Triton kernels, differentiable in x,
    weight and bias. Under autocast the output is float32, as PyTorch's is; otherwise x's dtype."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    check_kernel_input("x", x)
    width = x.shape[-1] if x.dim() else 0
    if tuple(normalized_shape) != (width,):
        raise ValueError(f"normalized_shape must be ({width},), x's last dimension: the kernels "
                         f"normalize the last dimension alone, got {tuple(normalized_shape)}")
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"x's last dimension must be in [1, {MAX_WIDTH}], got {width}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p.shape != (width,) or p.device != x.device):
            raise ValueError(f"{name} must have shape ({width},) on {x.device}, got "
                             f"{tuple(p.shape)} on {p.device}")
    autocast = torch.is_autocast_enabled(x.device.type)
    out_dtype = torch.float32 if autocast else x.dtype
    y, _, _ = _forward_op(x.reshape(-1, width).contiguous(), weight, bias, float(eps), out_dtype)
    return y.view(x.shape)
