"""attention=local (sliding window): our kernels with a window (interpreter here) and the masked
SDPA path agree with the float64 reference and with each other; a window as wide as the sequence
is exact attention; bad windows fail in one line."""
import pytest
import torch

from fa_train.attention import build_attention, unpad_input
from fa_train.errors import UserError
from kernels import reference_attention


def _qkv(b=2, n=40, h=4, h_kv=2, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, n, h, d, generator=g)
    return q, *(torch.randn(b, n, h_kv, d, generator=g) for _ in range(2))


def _lengths_mask(lengths, n):
    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]


@pytest.fixture(params=["kernels", "sdpa"])
def path(request, monkeypatch):
    """Run the test on the kernel path (the interpreter) and on the masked SDPA path."""
    monkeypatch.setenv("TRITON_INTERPRET", "1" if request.param == "kernels" else "0")
    return request.param


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(5, 3), (7, -1), (-1, 2)])
def test_local_matches_the_windowed_reference(path, causal, window):
    attn = build_attention({"impl": "local", "window_left": window[0], "window_right": window[1]})
    q, k, v = _qkv(seed=window[0] + 10 * causal)
    mask = _lengths_mask([40, 29], 40)
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref, _ = reference_attention(q.double(), k.double(), v.double(), causal=causal,
                                 key_padding_mask=mask, window_size=window)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    full, _ = reference_attention(q.double(), k.double(), v.double(), causal=causal,
                                  key_padding_mask=mask)
    if causal and window[0] < 0:  # causal already bounds the right side
        assert torch.equal(ref, full)
    else:
        assert (ref - full).abs().max() > 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_a_window_as_wide_as_the_sequence_is_exact_attention(path, causal):
    q, k, v = _qkv(n=33, h_kv=4)
    exact = build_attention("standard")(q, k, v, causal=causal)
    out = build_attention({"impl": "local", "window_left": 33, "window_right": 40})(
        q, k, v, causal=causal)
    torch.testing.assert_close(out, exact, atol=1e-5, rtol=1e-5)


def test_varlen_and_packed_calls_match_the_padded_call(path):
    attn = build_attention({"impl": "local", "window_left": 4, "window_right": 6})
    assert attn.supports_varlen("cpu") is (path == "kernels")
    q, k, v = _qkv(h_kv=4)
    mask = _lengths_mask([40, 23], 40)
    padded = attn(q, k, v, key_padding_mask=mask)
    qkv = torch.stack([q, k, v], dim=2)
    _, idx, cu, max_len = unpad_input(q, mask)
    packed = qkv.reshape(80, 3, 4, 16)[idx]
    out = attn.packed(packed, cu_seqlens=cu, max_seqlen=max_len)
    torch.testing.assert_close(out, padded.reshape(80, 4, 16)[idx], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn.packed(qkv, key_padding_mask=mask), padded, atol=1e-6,
                               rtol=1e-6)


def test_backward_through_both_paths_agrees(monkeypatch):
    q, k, v = (t.requires_grad_() for t in _qkv(n=37))
    attn = build_attention({"impl": "local", "window_left": 6, "window_right": 2})
    grads = []
    for interpret in ("1", "0"):
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        out = attn(q, k, v, causal=True)
        grads.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    for kernel_grad, sdpa_grad in zip(*grads):
        torch.testing.assert_close(kernel_grad, sdpa_grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("key,value", [("window_left", -2), ("window_right", 1.5),
                                       ("window_left", True)])
def test_bad_windows_fail_in_one_line_naming_the_key(key, value):
    with pytest.raises(UserError) as err:
        build_attention({"impl": "local", key: value})
    assert f"attention.{key}" in str(err.value) and "\n" not in str(err.value)
