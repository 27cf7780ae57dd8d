"""Fused linear cross entropy against PyTorch's loss in float64 (interpreter on the CPU)."""
import pytest
import torch
import torch.nn.functional as F

from kernels.cross_entropy import _linear_cross_entropy_op, linear_cross_entropy
from tests.kernels.helpers import rel_err

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def _inputs(tokens, rows, features, vocab, dtype, ignored_every=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(tokens, features, generator=gen).to(dtype).requires_grad_()
    weight = torch.randn(rows, features, generator=gen).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    if ignored_every:
        targets[::ignored_every] = -100
    return h, weight, targets


def _reference(h, weight, targets, vocab):
    h64, w64 = (x.detach().double().requires_grad_() for x in (h, weight))
    loss = F.cross_entropy((h64 @ w64.t())[:, :vocab], targets, ignore_index=-100)
    loss.backward()
    return loss, h64.grad, w64.grad


@pytest.mark.parametrize("tokens,rows,vocab,dtype,ignored_every", [
    (17, 256, 200, torch.float32, 3),     # padding rows, a partial last vocabulary block
    (1, 64, 64, torch.float32, 0),
    (100, 72, 72, torch.bfloat16, 5),
    (33, 8, 1, torch.float32, 0),         # one class: loss and gradients zero
    (64, 130, 129, torch.float16, 4),
])
def test_matches_float64_reference(tokens, rows, vocab, dtype, ignored_every):
    h, weight, targets = _inputs(tokens, rows, 16, vocab, dtype, ignored_every)
    loss = linear_cross_entropy(h, weight, targets, vocab)
    loss.backward()
    ref, ref_h, ref_w = _reference(h, weight, targets, vocab)
    assert loss.dtype == torch.float32
    assert abs(float(loss.detach()) - float(ref)) <= TOL[dtype] * max(1.0, abs(float(ref)))
    assert rel_err(h.grad, ref_h) < TOL[dtype]
    assert rel_err(weight.grad, ref_w) < TOL[dtype]
    assert not weight.grad[vocab:].any()  # padding rows are never predicted


def test_float16_gradients_do_not_underflow():
    # (softmax - one_hot) / tokens would fall below float16's normal range here (1/64/1024)
    h, weight, targets = _inputs(1024, 64, 8, 64, torch.float16, seed=1)
    linear_cross_entropy(h, weight, targets).backward()
    _, ref_h, ref_w = _reference(h, weight, targets, 64)
    assert rel_err(h.grad, ref_h) < 1e-2 and rel_err(weight.grad, ref_w) < 1e-2


def test_without_grad_gives_the_same_loss():
    h, weight, targets = _inputs(9, 80, 80, 80, torch.float32, 2)
    with torch.no_grad():
        no_grad = linear_cross_entropy(h, weight, targets)
    torch.testing.assert_close(no_grad, linear_cross_entropy(h, weight, targets))


def test_nan_when_nothing_counts_or_a_target_is_out_of_range():
    h, weight, targets = _inputs(4, 32, 16, 32, torch.float32)
    h, weight = h.detach(), weight.detach()
    assert torch.isnan(linear_cross_entropy(h, weight, torch.full_like(targets, -100)))
    assert torch.isnan(F.cross_entropy(h @ weight.t(), torch.full_like(targets, -100)))
    targets[1] = 40  # beyond vocab_size 32 but inside weight's padding rows
    weight = torch.cat([weight, torch.zeros(16, 16)])
    assert torch.isnan(linear_cross_entropy(h, weight, targets, vocab_size=32))


def test_op_registration():
    h, weight, targets = _inputs(5, 40, 40, 40, torch.float32, 2)
    torch.library.opcheck(_linear_cross_entropy_op, (h, weight, targets, 40, -100, True))


@pytest.mark.parametrize("args,error,match", [
    (lambda h, w, t: (h[0], w, t), ValueError, "h must be a 2-D tensor"),
    (lambda h, w, t: (h, w[:, :8], t), ValueError, "weight has 8 columns"),
    (lambda h, w, t: (h, w.double(), t), TypeError, "weight has dtype"),
    (lambda h, w, t: (h, w.half(), t), TypeError, "must share a dtype"),
    (lambda h, w, t: (h, w, t[:3]), ValueError, "targets must have shape"),
    (lambda h, w, t: (h, w, t.float()), TypeError, "targets must hold integer"),
    (lambda h, w, t: (h, w, t, 50), ValueError, "vocab_size must be in"),
])
def test_bad_input_names_the_argument(args, error, match):
    h, weight, targets = _inputs(4, 40, 16, 40, torch.float32)
    with pytest.raises(error, match=match):
        linear_cross_entropy(*args(h.detach(), weight.detach(), targets))
