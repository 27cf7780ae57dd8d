"""GPU checks of the LayerNorm kernels at training sizes (float64 reference, poisoned buffers)."""
import pytest
import torch
import torch.nn.functional as F

from fa_train.models.layer_norm import LayerNorm
from kernels.layer_norm import layer_norm
from tests.kernels.helpers import rel_err
from tests.kernels.test_gpu_kernels import poison_allocator

pytestmark = pytest.mark.gpu

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,width", [(256 * 4097, 32), (4096 * 3 + 5, 100), (8192, 768),
                                        (333, 4096)])
def test_matches_float64_reference(dtype, rows, width):
    torch.manual_seed(width)
    x = (torch.randn(rows, width, device="cuda") * 2 + 0.5).to(dtype).requires_grad_()
    weight = torch.randn(width, device="cuda", requires_grad=True)
    bias = torch.randn(width, device="cuda", requires_grad=True)
    dy = torch.randn(rows, width, device="cuda", dtype=dtype)
    poison_allocator()
    y = layer_norm(x, (width,), weight, bias)
    y.backward(dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, weight, bias)]
    ref = F.layer_norm(leaves[0], (width,), leaves[1], leaves[2])
    ref.backward(dy.double())
    assert not y.isnan().any()
    assert rel_err(y, ref) < TOL[dtype]
    for name, t, r in zip(("x", "weight", "bias"), (x, weight, bias), leaves):
        assert rel_err(t.grad, r.grad) < TOL[dtype] * (10 if name != "x" else 1), name


def test_module_under_autocast_matches_pytorch():
    """auto picks the kernels on CUDA for narrow rows; dtype and values as nn.LayerNorm's."""
    torch.manual_seed(0)
    fused, plain = LayerNorm(32).cuda(), torch.nn.LayerNorm(32).cuda()
    assert fused.fused(torch.empty(1, device="cuda"))
    x = torch.randn(4096, 32, device="cuda", dtype=torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, ref = fused(x), plain(x)
    assert y.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(y, ref)


def test_compiled_module_matches_eager():
    torch.manual_seed(1)
    norm = LayerNorm(32, impl="fused").cuda()
    x = torch.randn(64, 50, 32, device="cuda", requires_grad=True)
    compiled = torch.compile(norm, fullgraph=True)
    y = compiled(x)
    y.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    norm(x).sum().backward()
    torch.testing.assert_close(y, norm(x))
    torch.testing.assert_close(grad, x.grad)
