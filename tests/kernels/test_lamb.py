"""The two-kernel LAMB step (kernels/lamb.py) against the multi-tensor one of fa_train's Lamb."""
import pytest
import torch

from fa_train.tasks.optim import Lamb
from kernels import lamb
from kernels.torch_ops import interpreting

# sizes around the interpreter's 256-element chunks: one element, none, partial, exact, several
SHAPES = [(1,), (0,), (17,), (256,), (257,), (1000,), (30, 40), (5, 3)]
needs_kernels = pytest.mark.skipif(not (interpreting() or torch.cuda.is_available()),
                                   reason="needs TRITON_INTERPRET=1 or a CUDA GPU")


def _problem(device, grad_dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen) for s in SHAPES]
    params[-1].zero_()  # ||w|| = 0: trust ratio 1
    grads = [[torch.randn(s, generator=gen).to(grad_dtype) for s in SHAPES] for _ in range(3)]
    return ([p.to(device) for p in params],
            [[g.to(device) for g in step] for step in grads])


def _reference(params, grads_per_step, lr, betas, eps, weight_decay):
    """Lamb's multi-tensor step on CPU copies, float32 gradients."""
    params = [p.detach().cpu().clone().requires_grad_() for p in params]
    opt = Lamb(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.cpu().float()
        opt.step()
    return params, opt


@needs_kernels
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_lamb_step_matches_the_multi_tensor_step(grad_dtype, weight_decay):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    params, grads_per_step = _problem(device, grad_dtype)
    expected, opt = _reference(params, grads_per_step, 0.05, (0.9, 0.99), 1e-6, weight_decay)
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for step, grads in enumerate(grads_per_step, start=1):
        lamb.lamb_step(params, grads, m, v, 0.05, (0.9, 0.99), 1e-6, weight_decay, step)
    for p, e, mi, vi in zip(params, expected, m, v):
        state = opt.state[e]
        torch.testing.assert_close(mi.cpu(), state["m"], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(vi.cpu(), state["v"], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(p.cpu(), e.detach(), rtol=1e-5, atol=1e-6)


def test_supports_only_what_the_kernels_take():
    w = torch.zeros(4)
    assert not lamb.supports([w], [w], [w], [w])  # CPU tensors: the multi-tensor path
    if torch.cuda.is_available():
        c = w.cuda()
        assert lamb.supports([c], [c], [c], [c])
        assert not lamb.supports([c], [c.double()], [c], [c])
        assert not lamb.supports([c.half()], [c], [c.half()], [c.half()])
        t = torch.zeros(4, 4, device="cuda").t()
        assert not lamb.supports([t], [t], [t], [t])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_lamb_on_a_gpu_runs_the_kernels_and_matches_the_cpu_step(monkeypatch):
    params, grads_per_step = _problem("cuda", torch.float32, seed=1)
    expected, _ = _reference(params, grads_per_step, 0.01, (0.9, 0.999), 1e-6, 0.01)
    calls, real = [], lamb.lamb_step
    monkeypatch.setattr(lamb, "lamb_step", lambda *a: calls.append(1) or real(*a))
    params = [p.requires_grad_() for p in params]
    opt = Lamb(params, lr=0.01, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    assert len(calls) == len(grads_per_step)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
