"""GPU checks of sliding-window attention at realistic sizes (bf16/fp16 against float64): odd
lengths, one-sided windows, causal, padding with dropout and GQA, varlen, compiled graphs
(test_gpu_kernels.py repeats a windowed backward, which must give the same bits)."""
import pytest
import torch

from kernels import dropout_mask, flash_attn_func, flash_attn_varlen_func, next_dropout_seed
from tests.kernels.helpers import assert_varlen_matches_reference, backward_path
from tests.kernels.test_gpu_kernels import _check, _inputs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128, 80])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(256, 256), (100, -1), (-1, 37), (1, 1)])
@pytest.mark.parametrize("seqlen", [1000, 4096])
def test_window_realistic(dtype, head_dim, causal, window, seqlen, monkeypatch):
    if causal and window[0] < 0:
        pytest.skip("plain causal attention")
    torch.manual_seed(seqlen + head_dim + window[0])
    tensors = _inputs(2, seqlen, 4, 2, head_dim, dtype)
    deterministic = backward_path(monkeypatch, dtype == torch.float16)  # both backward paths
    _check(lambda q, k, v: flash_attn_func(q, k, v, causal=causal, window_size=window,
                                           deterministic=deterministic),
           tensors, dtype, causal=causal, window_size=window)


@pytest.mark.parametrize("seqlen_q,seqlen_k", [(1537, 1200), (1200, 1537)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_window_padding_dropout_gqa_uneven_lengths(seqlen_q, seqlen_k, deterministic):
    torch.manual_seed(1)
    batch, heads, window = 2, 8, (200, 50)
    tensors = _inputs(batch, seqlen_q, heads, 2, 64, torch.bfloat16, seqlen_k=seqlen_k)
    mask = torch.rand(batch, seqlen_k, device="cuda") > 0.2
    # the mask of the seed the checked call will draw (on the GPU), regenerated in its backward
    keep = dropout_mask(batch, heads, seqlen_q, seqlen_k, 0.1, next_dropout_seed())
    _check(lambda q, k, v: flash_attn_func(q, k, v, dropout_p=0.1, key_padding_mask=mask,
                                           window_size=window, deterministic=deterministic),
           tensors, torch.bfloat16, key_padding_mask=mask, dropout_mask=keep, dropout_p=0.1,
           window_size=window)


def test_window_varlen_forward_and_backward():
    torch.manual_seed(2)
    lengths, window = [1, 17, 1000, 513, 2048], (128, -1)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32,
                      device="cuda")
    total = sum(lengths)
    tensors = [torch.randn(total, h, 64, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for h in (8, 2, 2)]
    out = flash_attn_varlen_func(*tensors, cu, cu, max(lengths), max(lengths), causal=True,
                                 window_size=window)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, tensors, g)
    assert_varlen_matches_reference(out, grads, g, tensors, cu, 1e-2, causal=True,
                                    window_size=window)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_compiled_window_matches_eager(head_dim):
    torch.manual_seed(5)
    tensors = _inputs(2, 4096, 8, 2, head_dim, torch.bfloat16)
    fn = lambda q, k, v: flash_attn_func(q, k, v, causal=True, window_size=(512, -1))
    g = torch.randn_like(tensors[0])
    expected = [fn(*tensors)]
    expected += torch.autograd.grad(expected[0], tensors, g)
    compiled = torch.compile(fn)
    out = compiled(*tensors)
    got = [out] + list(torch.autograd.grad(out, tensors, g))
    for x, y in zip(got, expected):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
