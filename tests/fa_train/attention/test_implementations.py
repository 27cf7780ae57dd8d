"""Attention implementations: one signature, same numbers from every implementation."""
import os

import pytest
import torch

from fa_train.attention import build_attention, pad_input, unpad_input
from kernels import reference_attention

try:
    from kernels import flash_attn_func  # noqa: F401
    HAS_FLASH = True
except ImportError:
    HAS_FLASH = False
try:
    from kernels import blocksparse_attn_func  # noqa: F401
    HAS_BLOCKSPARSE = True
except ImportError:
    HAS_BLOCKSPARSE = False

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(b=2, n=32, h=2, d=16, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, n, h, d, generator=g).to(device) for _ in range(3)]


def _mask(b, n, lengths, device="cpu"):
    return torch.arange(n, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_standard_and_sdpa_match_reference(causal, padded):
    q, k, v = _qkv()
    kpm = _mask(2, 32, [32, 20]) if padded else None
    ref, _ = reference_attention(q.double(), k.double(), v.double(), causal=causal,
                                 key_padding_mask=kpm)
    for impl in ("standard", "sdpa"):
        out = build_attention(impl)(q, k, v, causal=causal, key_padding_mask=kpm)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5, msg=impl)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = _qkv(b=1, n=8)
    kpm = torch.zeros(1, 8, dtype=torch.bool)
    for impl in ("standard", "sdpa"):
        out = build_attention(impl)(q, k, v, key_padding_mask=kpm)
        assert torch.isfinite(out).all() and (out == 0).all(), impl


def test_varlen_fallback_matches_padded():
    q, k, v = _qkv(b=3, n=16)
    kpm = _mask(3, 16, [16, 5, 11])
    for impl in ("standard", "sdpa"):
        attn = build_attention(impl)
        padded = attn(q, k, v, key_padding_mask=kpm)
        qu, idx, cu, mx = unpad_input(q, kpm)
        ku = k.reshape(48, 2, 16)[idx]
        vu = v.reshape(48, 2, 16)[idx]
        packed = attn(qu, ku, vu, cu_seqlens=cu, max_seqlen=mx)
        torch.testing.assert_close(pad_input(packed, idx, 3, 16) * kpm[..., None, None],
                                   padded * kpm[..., None, None], atol=1e-5, rtol=1e-5)


def test_dropout_is_applied_in_training():
    q, k, v = _qkv()
    torch.manual_seed(0)
    a = build_attention("standard")(q, k, v, dropout_p=0.5)
    b = build_attention("standard")(q, k, v, dropout_p=0.0)
    assert not torch.allclose(a, b)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error path")
def test_triton_impls_on_cpu_without_interpreter_fail_clearly(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q, k, v = _qkv()
    for impl in ("flash", "blocksparse"):
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            build_attention(impl)(q, k, v)


@pytest.mark.skipif(not HAS_FLASH, reason="kernels.flash_attn_func is not importable")
@pytest.mark.skipif(not INTERPRET, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_matches_standard(causal):
    q, k, v = _qkv(n=32, d=16, device=DEV)
    kpm = _mask(2, 32, [32, 17], device=DEV)
    ref = build_attention("standard")(q, k, v, causal=causal, key_padding_mask=kpm)
    out = build_attention("flash")(q, k, v, causal=causal, key_padding_mask=kpm)
    torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)
    qu, idx, cu, mx = unpad_input(q, kpm)
    ku, vu = k.reshape(64, 2, 16)[idx], v.reshape(64, 2, 16)[idx]
    packed = build_attention("flash")(qu, ku, vu, causal=causal, cu_seqlens=cu, max_seqlen=mx)
    torch.testing.assert_close(pad_input(packed, idx, 2, 32) * kpm[..., None, None],
                               ref * kpm[..., None, None], atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("impl", ["standard", "sdpa", "flash", "blocksparse"])
@pytest.mark.parametrize("varlen", [False, True])
def test_packed_qkv_gives_what_the_three_views_give(impl, varlen):
    """Attention.packed (what models with a fused q/k/v projection call) equals the call on the
    views, dense and packed-varlen, for every implementation (flash has a path of its own)."""
    if impl in ("flash", "blocksparse") and not INTERPRET:
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    q, k, v = _qkv(n=32, d=16, device=DEV)
    qkv = torch.stack([q, k, v], dim=2)
    attn = build_attention({"impl": impl, "block_size": 16})
    kwargs = dict(causal=True)
    if varlen:
        _, idx, cu, mx = unpad_input(q, _mask(2, 32, [32, 17], device=DEV))
        qkv = qkv.reshape(64, 3, 2, 16)[idx]
        kwargs.update(cu_seqlens=cu, max_seqlen=mx)
    out = attn.packed(qkv, **kwargs)
    torch.testing.assert_close(out, attn(*qkv.unbind(dim=-3), **kwargs), atol=1e-6, rtol=1e-6)


@pytest.mark.skipif(not HAS_BLOCKSPARSE, reason="kernels.blocksparse_attn_func is not importable")
@pytest.mark.skipif(not INTERPRET, reason="needs CUDA or TRITON_INTERPRET=1")
def test_blocksparse_matches_masked_reference():
    attn = build_attention({"impl": "blocksparse", "block_size": 16, "butterfly_size": 2})
    q, k, v = _qkv(n=64, d=16, device=DEV)
    out = attn(q, k, v)
    lay = attn.config.build(64)
    tok = lay.repeat_interleave(16, 0).repeat_interleave(16, 1)
    ref, _ = reference_attention(q.double(), k.double(), v.double(), attn_mask=tok[None, None])
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
