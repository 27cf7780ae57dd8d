"""The LayerNorm kernels against PyTorch's in float64 (interpreter on the CPU), and the module
that dispatches to them."""
import pytest
import torch
import torch.nn.functional as F

from fa_train.errors import UserError
from fa_train.models.layer_norm import LayerNorm
from kernels import layer_norm as ln_kernels
from kernels.layer_norm import layer_norm
from tests.kernels.helpers import rel_err

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def _inputs(shape, dtype, affine, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 3 + 1).to(dtype).requires_grad_()
    width = shape[-1]
    weight = (torch.randn(width, generator=gen) if affine else None)
    bias = (torch.randn(width, generator=gen) if affine and bias else None)
    return x, *[p.requires_grad_() if p is not None else None for p in (weight, bias)]


def _grads(out, leaves, dy):
    out.backward(dy)
    return [None if t is None else t.grad for t in leaves]


@pytest.mark.parametrize("shape,dtype,affine,bias", [
    ((37, 32), torch.float32, True, True),         # a partial last tile of rows
    ((2, 9, 33), torch.float32, True, True),       # a width that is not a power of two, 3-D input
    ((70, 8), torch.bfloat16, True, True),
    ((300, 20), torch.float16, True, False),       # several tiles per backward program, no bias
    ((5, 3), torch.float32, True, True),           # three features
    ((40, 100), torch.float32, False, False),      # no weight nor bias
])
def test_matches_float64_reference(shape, dtype, affine, bias):
    x, weight, b = _inputs(shape, dtype, affine, bias, seed=sum(shape))
    y = layer_norm(x, shape[-1:], weight, b, eps=1e-5)
    assert y.dtype == dtype and y.shape == x.shape
    dy = torch.randn_like(y)
    leaves = [x, weight, b]
    grads = _grads(y, leaves, dy)
    ref_leaves = [None if t is None else t.detach().double().requires_grad_() for t in leaves]
    ref = F.layer_norm(ref_leaves[0], shape[-1:], *ref_leaves[1:], eps=1e-5)
    ref_grads = _grads(ref, ref_leaves, dy.double())
    assert rel_err(y, ref) < TOL[dtype]
    for name, g, r in zip(("x", "weight", "bias"), grads, ref_grads):
        if r is None:
            assert g is None, name
        else:
            assert g.dtype == leaves[("x", "weight", "bias").index(name)].dtype
            assert rel_err(g, r) < TOL[dtype], name


def test_backward_repeats_bit_for_bit():
    """Each program sums its own tiles in a fixed order: no race between programs."""
    x, weight, b = _inputs((300, 24), torch.float32, True, True, seed=3)
    dy = torch.randn(300, 24)
    first = _grads(layer_norm(x, (24,), weight, b), [x, weight, b], dy)
    first = [g.clone() for g in first]
    for t in (x, weight, b):
        t.grad = None
    again = _grads(layer_norm(x, (24,), weight, b), [x, weight, b], dy)
    assert all(torch.equal(f, a) for f, a in zip(first, again))


def test_statistics_of_every_row_written(monkeypatch):
    """A row tile cut by the end of x still writes its rows' mean and rstd (poisoned buffers)."""
    empty = torch.empty
    monkeypatch.setattr(ln_kernels.torch, "empty",
                        lambda *a, **k: empty(*a, **k).fill_(float("nan")))
    x = torch.randn(13, 16)
    y, mean, rstd = ln_kernels._forward(x, None, None, 1e-5, torch.float32)
    assert not (y.isnan().any() or mean.isnan().any() or rstd.isnan().any())
    torch.testing.assert_close(mean, x.mean(1))


def test_autocast_gives_float32():
    """As PyTorch's CUDA autocast does for layer_norm (tests/kernels/test_gpu_layer_norm.py)."""
    x = torch.randn(6, 16, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer_norm(x, (16,), torch.ones(16)).dtype == torch.float32


@pytest.mark.parametrize("call,match", [
    (lambda x: layer_norm(x, (8,)), r"normalized_shape must be \(16,\)"),
    (lambda x: layer_norm(x, (16,), torch.ones(15)), r"weight must have shape \(16,\)"),
    (lambda x: layer_norm(x.repeat(1, 1000), (16000,)), r"last dimension must be in \[1, 8192\]"),
    (lambda x: layer_norm(x.long(), (16,)), "x has dtype torch.int64"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(torch.randn(4, 16))


def test_module_dispatch_and_state_dict():
    fused = LayerNorm(16, impl="fused")
    plain = torch.nn.LayerNorm(16)
    with torch.no_grad():
        fused.weight.normal_()
        fused.bias.normal_()
    plain.load_state_dict(fused.state_dict())  # the same parameters under the same names
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(fused(x), plain(x))
    assert LayerNorm(16).fused(x) is False          # auto: PyTorch off CUDA
    assert LayerNorm(16, impl="fused").fused(x) is True
    with pytest.raises(UserError, match="model.norm_impl"):
        LayerNorm(16, impl="triton")
