"""Attention implementations behind one registry and one signature (see the package docstring)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

AttentionFn = Callable[..., torch.Tensor]
ATTENTION_IMPLS: dict[str, AttentionFn] = {}
AUTO = "auto"


def register(name: str) -> Callable[[AttentionFn], AttentionFn]:
    def wrap(fn: AttentionFn) -> AttentionFn:
        ATTENTION_IMPLS[name] = fn
        return fn
    return wrap


def attention_impl_names() -> list[str]:
    """Valid values of ``attention.impl`` (``auto`` included)."""
    return sorted(ATTENTION_IMPLS) + [AUTO]


def resolve_impl(impl: str, device: torch.device | str | None = None) -> str:
    """Check ``impl`` and resolve ``auto``: flash on CUDA, sdpa everywhere else."""
    if impl == AUTO:
        dev = torch.device(device) if device is not None else None
        return "flash" if dev is not None and dev.type == "cuda" else "sdpa"
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention impl {impl!r}; valid choices: {attention_impl_names()}")
    return impl


def get_attention_fn(impl: str, device="cpu") -> AttentionFn:
    """The raw implementation function for ``impl`` (``auto`` resolved for ``device``)."""
    return ATTENTION_IMPLS[resolve_impl(impl, device)]


# ----------------------------------------------------------------------------------------------
# Padding helpers (varlen <-> padded)
# ----------------------------------------------------------------------------------------------
def unpad_input(x: torch.Tensor, key_padding_mask: torch.Tensor):
    """(B, N, ...) + (B, N) bool mask -> (total, ...), indices, cu_seqlens (int32), max_seqlen."""
    mask = key_padding_mask.to(torch.bool)
    seqlens = mask.sum(dim=1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    flat = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return flat.index_select(0, indices), indices, cu_seqlens, max_seqlen


def pad_input(x: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of :func:`unpad_input`: (total, ...) -> (B, N, ...) with zeros at padding."""
    out = x.new_zeros(batch * seqlen, *x.shape[1:])
    out.index_copy_(0, indices, x)
    return out.view(batch, seqlen, *x.shape[1:])


def _varlen_to_padded(cu_seqlens: torch.Tensor, max_seqlen: int, device):
    """Indices of packed tokens inside a (B, max_seqlen) grid and the matching key-padding mask."""
    seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.long)
    batch = seqlens.numel()
    pos = torch.arange(max_seqlen, device=device)
    mask = pos[None, :] < seqlens[:, None]
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    return mask, indices, batch


def _run_varlen_by_padding(fn, q, k, v, cu_seqlens, max_seqlen, **kw):
    mask, indices, batch = _varlen_to_padded(cu_seqlens, int(max_seqlen), q.device)
    n = int(max_seqlen)
    qp, kp, vp = (pad_input(t, indices, batch, n) for t in (q, k, v))
    out = fn(qp, kp, vp, key_padding_mask=mask, **kw)
    return out.reshape(batch * n, *out.shape[2:]).index_select(0, indices)


def _combined_mask(q, k, causal, key_padding_mask):
    """Boolean keep-mask broadcastable to (B, H, Nq, Nk), or None. Causal is bottom-right aligned."""
    nq, nk = q.shape[1], k.shape[1]
    keep = None
    if causal:
        rows = torch.arange(nq, device=q.device)[:, None]
        cols = torch.arange(nk, device=q.device)[None, :]
        keep = (cols <= rows + (nk - nq))[None, None]
    if key_padding_mask is not None:
        kpm = key_padding_mask.to(torch.bool)[:, None, None, :]
        keep = kpm if keep is None else keep & kpm
    return keep


# ----------------------------------------------------------------------------------------------
# standard: materialized attention (the paper's baseline)
# ----------------------------------------------------------------------------------------------
@register("standard")
def standard_attention(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                       softmax_scale=None, cu_seqlens=None, max_seqlen=None, **_):
    """Scores in (B, H, N, N), masks, fp32 softmax, torch dropout, matmul."""
    if cu_seqlens is not None:
        return _run_varlen_by_padding(standard_attention, q, k, v, cu_seqlens, max_seqlen,
                                      causal=causal, dropout_p=dropout_p, softmax_scale=softmax_scale)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, N, d)
    scores = torch.matmul(qh, kh.transpose(-2, -1)) * scale
    keep = _combined_mask(q, k, causal, key_padding_mask)
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores.float(), dim=-1)
    if keep is not None:  # fully masked rows give zeros, never NaN
        probs = probs.masked_fill(~keep, 0.0)
    probs = probs.to(q.dtype)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return torch.matmul(probs, vh).transpose(1, 2)


# ----------------------------------------------------------------------------------------------
# sdpa: PyTorch's fused attention (picks flash / efficient / cuDNN / math by itself)
# ----------------------------------------------------------------------------------------------
@register("sdpa")
def sdpa_attention(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                   softmax_scale=None, cu_seqlens=None, max_seqlen=None, **_):
    if cu_seqlens is not None:
        return _run_varlen_by_padding(sdpa_attention, q, k, v, cu_seqlens, max_seqlen,
                                      causal=causal, dropout_p=dropout_p, softmax_scale=softmax_scale)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = None
    is_causal = causal
    if key_padding_mask is not None or (causal and q.shape[1] != k.shape[1]):
        mask = _combined_mask(q, k, causal, key_padding_mask)
        is_causal = False
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, dropout_p=dropout_p,
                                         is_causal=is_causal, scale=softmax_scale)
    if mask is not None:  # rows with no visible key: zeros (sdpa's math path may give NaN)
        out = torch.nan_to_num(out, nan=0.0)
    return out.transpose(1, 2)


# ----------------------------------------------------------------------------------------------
# flash / blocksparse: our Triton kernels
# ----------------------------------------------------------------------------------------------
def _kernels(name: str):
    try:
        import kernels
        return getattr(kernels, name)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(
            f"attention impl needs kernels.{name}, which is not available ({exc}); "
            f"use attention=sdpa or attention=standard") from exc


def _check_triton_device(q, impl):
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            f"attention impl {impl!r} runs Triton kernels and needs CUDA tensors, got device "
            f"{q.device}; set TRITON_INTERPRET=1 to run them (slowly) on CPU, or use "
            f"attention=sdpa / attention=standard / attention=auto")


def _opaque_to_compile(fn):
    """torch.compile runs `fn` eagerly (a graph break): block-sparse layouts and their index are
    built and cached in Python, which tracing cannot follow. The dense flash path needs no break:
    the kernels are torch ops that compiled graphs call as nodes of their own."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(fn) if disable is not None else fn


@register("flash")
def flash_attention(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                    softmax_scale=None, cu_seqlens=None, max_seqlen=None, **_):
    _check_triton_device(q, "flash")
    if cu_seqlens is not None:
        varlen = _kernels("flash_attn_varlen_func")
        cu = cu_seqlens.to(torch.int32)
        return varlen(q, k, v, cu, cu, int(max_seqlen), int(max_seqlen), dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal)
    func = _kernels("flash_attn_func")
    return func(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                key_padding_mask=key_padding_mask)


def flash_attention_packed(qkv, causal=False, dropout_p=0.0, key_padding_mask=None,
                           softmax_scale=None, cu_seqlens=None, max_seqlen=None):
    """flash over a packed qkv (B, N, 3, H, d), or (total, 3, H, d) with cu_seqlens: the kernels
    read q, k, v in place and write one packed gradient (no copies of q, k, v)."""
    _check_triton_device(qkv, "flash")
    if cu_seqlens is not None:
        varlen = _kernels("flash_attn_varlen_qkvpacked_func")
        return varlen(qkv, cu_seqlens.to(torch.int32), int(max_seqlen), dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal)
    return _kernels("flash_attn_qkvpacked_func")(
        qkv, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        key_padding_mask=key_padding_mask)


# implementations with a path of their own for packed q, k, v; the others get the three views
PACKED_IMPLS: dict[str, AttentionFn] = {"flash": flash_attention_packed}


@dataclass
class BlocksparseConfig:
    """Block-sparse layout parameters (see shared spec butterfly.md).

    block_size: tokens per block side. butterfly_size: size b of the diagonal butterfly groups in
    blocks (null = all blocks). n_factors: XOR factors (null = log2(butterfly_size)).
    global_size: dense leading block rows/cols. local_window: extra sliding window, in blocks
    each side (0 = none).
    """
    block_size: int = 128
    butterfly_size: int | None = None
    n_factors: int | None = None
    global_size: int = 0
    local_window: int = 0


_LAYOUT_CACHE: dict[tuple, torch.Tensor] = {}
LAYOUT_STATS: dict[str, Any] = {}  # the last layout built: seqlen, block size, density (for metrics)


def build_layout(seqlen: int, device, cfg: BlocksparseConfig, causal: bool = False) -> torch.Tensor:
    """(nb, nb) bool block layout from kernels.layouts, cached per (seqlen, device, config, causal):
    butterfly (butterfly_size, n_factors, global_size) OR a local band of ``local_window`` blocks,
    intersected with the lower block triangle when causal."""
    key = (seqlen, str(device), cfg.block_size, cfg.butterfly_size, cfg.n_factors,
           cfg.global_size, cfg.local_window, causal)
    layout = _LAYOUT_CACHE.get(key)
    if layout is not None:
        return layout
    from kernels import layouts as kl
    layout = kl.butterfly_layout(seqlen, cfg.block_size, butterfly_size=cfg.butterfly_size,
                                 n_factors=cfg.n_factors, global_size=cfg.global_size)
    if cfg.local_window:
        layout = kl.layout_union(layout, kl.local_layout(seqlen, cfg.block_size, cfg.local_window))
    if causal:
        layout = kl.causal_layout(layout)
    layout = layout.to(device)
    _LAYOUT_CACHE[key] = layout
    LAYOUT_STATS.update(blocksparse_seqlen=seqlen, blocksparse_block_size=cfg.block_size,
                        blocksparse_density=layout_density(layout), blocksparse_causal=causal)
    return layout


_INDEX_CACHE: dict[tuple, Any] = {}


def build_index(seqlen: int, device, cfg: BlocksparseConfig, causal: bool = False):
    """The kernel's prebuilt block lists (kernels.BlockSparseIndex) for the layout, cached per
    (seqlen, device, config, causal) so they are built once, not at every call."""
    key = (seqlen, str(device), cfg.block_size, cfg.butterfly_size, cfg.n_factors,
           cfg.global_size, cfg.local_window, causal)
    index = _INDEX_CACHE.get(key)
    if index is None:
        layout = build_layout(seqlen, device, cfg, causal)
        index_cls = getattr(__import__("kernels"), "BlockSparseIndex", None)
        if index_cls is None:
            return layout
        index = index_cls.from_layout(layout, cfg.block_size, seqlen, seqlen, causal, device)
        _INDEX_CACHE[key] = index
    return index


def layout_density(layout: torch.Tensor) -> float:
    return float(layout.float().mean())


@register("blocksparse")
@_opaque_to_compile
def blocksparse_attention(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                          softmax_scale=None, cu_seqlens=None, max_seqlen=None,
                          blocksparse: BlocksparseConfig | None = None, **_):
    if cu_seqlens is not None:
        return _run_varlen_by_padding(blocksparse_attention, q, k, v, cu_seqlens, max_seqlen,
                                      causal=causal, dropout_p=dropout_p,
                                      softmax_scale=softmax_scale, blocksparse=blocksparse)
    _check_triton_device(q, "blocksparse")
    cfg = blocksparse or BlocksparseConfig()
    func = _kernels("blocksparse_attn_func")
    layout = build_index(q.shape[1], q.device, cfg, causal=causal)
    return func(q, k, v, layout, block_size=cfg.block_size, dropout_p=dropout_p,
                softmax_scale=softmax_scale, causal=causal, key_padding_mask=key_padding_mask)


# ----------------------------------------------------------------------------------------------
# The object models hold
# ----------------------------------------------------------------------------------------------
@dataclass
class Attention:
    """A configured attention implementation; call it with the common signature."""
    impl: str = AUTO
    blocksparse: BlocksparseConfig = field(default_factory=BlocksparseConfig)

    def __post_init__(self):
        if self.impl != AUTO:
            resolve_impl(self.impl)
        if isinstance(self.blocksparse, Mapping):
            self.blocksparse = BlocksparseConfig(**dict(self.blocksparse))

    def resolved(self, device) -> str:
        return resolve_impl(self.impl, device)

    def __call__(self, q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                 softmax_scale=None, cu_seqlens=None, max_seqlen=None):
        impl = resolve_impl(self.impl, q.device)
        fn = ATTENTION_IMPLS[impl]
        extra = {"blocksparse": self.blocksparse} if impl == "blocksparse" else {}
        return fn(q, k, v, causal=causal, dropout_p=dropout_p, key_padding_mask=key_padding_mask,
                  softmax_scale=softmax_scale, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, **extra)

    def packed(self, qkv, causal=False, dropout_p=0.0, key_padding_mask=None,
               softmax_scale=None, cu_seqlens=None, max_seqlen=None):
        """Attention over q, k, v packed along dim -3 of ``qkv`` ((B, N, 3, H, d), or
        (total, 3, H, d) with cu_seqlens), as a fused q/k/v projection makes them."""
        kwargs = dict(causal=causal, dropout_p=dropout_p, key_padding_mask=key_padding_mask,
                      softmax_scale=softmax_scale, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen)
        packed_fn = PACKED_IMPLS.get(resolve_impl(self.impl, qkv.device))
        if packed_fn is not None:
            return packed_fn(qkv, **kwargs)
        return self(*qkv.unbind(dim=-3), **kwargs)

    def supports_varlen(self, device) -> bool:
        """True when the resolved impl runs packed (unpadded) input natively."""
        return self.resolved(device) == "flash"


_BS_KEYS = {f.name for f in fields(BlocksparseConfig)}


def build_attention(cfg: Any = None, **overrides) -> Attention:
    """Attention from a config: a name ('flash'), a mapping ({'impl': 'blocksparse',
    'block_size': 64, ...}, the shape of configs/attention/*.yaml) or an Attention."""
    if isinstance(cfg, Attention):
        return cfg
    if cfg is None:
        cfg = {}
    if isinstance(cfg, str):
        cfg = {"impl": cfg}
    cfg = dict(cfg)
    cfg.update(overrides)
    impl = cfg.pop("impl", AUTO)
    nested = cfg.pop("blocksparse", None) or {}
    bs = {k: v for k, v in cfg.items() if k in _BS_KEYS}
    bs.update(dict(nested))
    return Attention(impl=impl, blocksparse=BlocksparseConfig(**bs))
