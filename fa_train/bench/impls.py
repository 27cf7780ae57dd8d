"""Attention implementations under benchmark, each adapted to one calling convention.

An implementation turns a :class:`Case` and (B, N, H, d) input tensors into a :class:`Built`:
a no-argument forward function (inputs already laid out the way the implementation wants them,
so the timed call does no transposes or copies), its leaf tensors (for gradients) and a converter
of its output back to (B, N, H, d) for the correctness guard.

- ``flash``, ``flash_deterministic`` (``deterministic=True``: a dQ pass instead of atomics) and
  ``standard`` (materialized, the paper's baseline): the classes of ``fa_train.attention``'s
  registry, called as models call them, (B, N, H, d) with padding through ``key_padding_mask``.
- ``sdpa_flash`` / ``sdpa_cudnn`` / ``sdpa_efficient``: torch SDPA pinned to one backend, (B, H, N, d).
- ``flex``: ``torch.compile(flex_attention)`` (eager on CPU) with a BlockMask for causal/padding
  and, for a case with a window, the sliding window.
- ``local``: our sliding-window attention (``fa_train.attention``'s ``local``) at the case's
  window; it runs only cases with one.
- ``linformer``, ``linear``, ``performer``, ``reformer``, ``smyrf`` (BASELINE_IMPL_NAMES, not run
  unless named): the paper's approximate baselines from the registry with their configs'
  defaults, built per case on its device; approximations get no correctness check and no FLOP
  count.

Implementations whose ``applies_window`` is False compute full attention in a case with a window
(the dense baseline beside the windowed rows).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fa_train.bench.common import Unsupported

ATTENTION_IMPL_NAMES = ("flash", "flash_deterministic", "standard", "sdpa_flash", "sdpa_cudnn",
                        "sdpa_efficient", "flex")
BASELINE_IMPL_NAMES = ("linformer", "linear", "performer", "reformer", "smyrf")
# what a benchmark with a sliding window runs by default: ours, FlexAttention's, dense flash
WINDOW_IMPL_NAMES = ("local", "flex", "flash")
KNOWN_IMPL_NAMES = tuple(dict.fromkeys(ATTENTION_IMPL_NAMES + WINDOW_IMPL_NAMES
                                       + BASELINE_IMPL_NAMES))


@dataclass
class Case:
    """One attention problem: shapes, masking variant, dtype and device."""
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    causal: bool = False
    dropout_p: float = 0.0
    padding: bool = False
    dtype: torch.dtype = torch.bfloat16
    device: torch.device = torch.device("cpu")
    lengths: Optional[torch.Tensor] = None  # (B,) valid key/query lengths when padding
    window: Optional[int] = None  # sliding window: keys each side of the diagonal a query sees

    @property
    def window_size(self):
        """(left, right) in flash-attn's convention; (-1, -1) without a window."""
        return (-1, -1) if self.window is None else (self.window, self.window)

    @property
    def key_padding_mask(self):
        """(B, N) bool, True = real token; None without padding."""
        if self.lengths is None:
            return None
        pos = torch.arange(self.seqlen, device=self.lengths.device)
        return pos[None, :] < self.lengths[:, None]


def padding_lengths(batch, seqlen, seed=0, device="cpu"):
    """Valid lengths for the padding variant: uniform in [seqlen // 2, seqlen], seeded."""
    gen = torch.Generator().manual_seed(seed)
    low = max(1, seqlen // 2)
    return torch.randint(low, seqlen + 1, (batch,), generator=gen).to(device)


@dataclass
class Built:
    fn: Callable[[], torch.Tensor]
    leaves: list
    to_bnhd: Callable[[torch.Tensor], torch.Tensor]


def _leaves_bnhd(q, k, v):
    return [t.detach().requires_grad_() for t in (q, k, v)]


def _leaves_bhnd(q, k, v):
    return [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]


def _identity(out):
    return out


def _from_bhnd(out):
    return out.transpose(1, 2)


class AttentionImpl:
    """Base: name, check_support(case) raising Unsupported, build(case, q, k, v, dropout_p);
    `exact` False: an approximation, not checked against the reference.
    applies_window: whether it computes a case's sliding window (else full attention)."""
    name = ""
    exact = True
    applies_window = False

    def check_support(self, case: Case) -> None:
        pass

    def build(self, case: Case, q, k, v, dropout_p: float) -> Built:
        raise NotImplementedError


class RegistryImpl(AttentionImpl):
    """An implementation of fa_train.attention's registry, built from an attention config and
    called as models call it; what it cannot run follows from its `supports` declaration."""

    def __init__(self, name, config):
        from fa_train.attention import build_attention
        self.name, self.attention = name, build_attention(config)

    def attention_for(self, case):
        """The attention object that runs `case`."""
        return self.attention

    def check_support(self, case):
        attention = self.attention_for(case)
        asked = {"causal": case.causal, "dropout": case.dropout_p > 0.0,
                 "key_padding_mask": case.padding}
        missing = sorted(f for f, wanted in asked.items() if wanted and f not in attention.supports)
        if missing:
            raise Unsupported(f"{self.name} does not support {', '.join(missing)}")
        if (attention.runs_triton and case.device.type != "cuda"
                and os.environ.get("TRITON_INTERPRET") != "1"):
            raise Unsupported(f"{self.name} runs Triton kernels: needs CUDA (or TRITON_INTERPRET=1)")

    def build(self, case, q, k, v, dropout_p):
        attn, causal, mask = self.attention_for(case), case.causal, case.key_padding_mask
        leaves = _leaves_bnhd(q, k, v)
        return Built(lambda: attn(*leaves, causal=causal, dropout_p=dropout_p,
                                  key_padding_mask=mask), leaves, _identity)


class BaselineImpl(RegistryImpl):
    """An approximate baseline of the registry, built for each case on its device (linformer's
    projections are sized by the sequence length)."""
    exact = False

    def __init__(self, name, config=None):
        self.name, self.config = name, config or name

    def attention_for(self, case):
        from fa_train.attention import build_attention
        attention = build_attention(self.config, max_seq_len=case.seqlen)
        return attention.to(case.device) if isinstance(attention, torch.nn.Module) else attention


class SDPAImpl(AttentionImpl):
    """torch SDPA restricted to one backend (torch.nn.attention.sdpa_kernel)."""

    def __init__(self, name, backend):
        self.name, self.backend = name, backend

    def check_support(self, case):
        from torch.nn.attention import SDPBackend
        if not hasattr(SDPBackend, self.backend):
            raise Unsupported(f"this torch has no SDPBackend.{self.backend}")
        if self.backend == "FLASH_ATTENTION" and case.padding:
            raise Unsupported("the SDPA flash backend takes no attn_mask, which the padding mask needs")

    def build(self, case, q, k, v, dropout_p):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = getattr(SDPBackend, self.backend)
        leaves = _leaves_bhnd(q, k, v)
        attn_mask, is_causal = None, case.causal
        if case.padding:  # SDPA refuses attn_mask together with is_causal: fold causal in
            attn_mask = case.key_padding_mask[:, None, None, :]
            if case.causal:
                n = case.seqlen
                tri = torch.ones(n, n, dtype=torch.bool, device=case.device).tril()
                attn_mask = attn_mask & tri[None, None]
            is_causal = False

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*leaves, attn_mask=attn_mask,
                                                      dropout_p=dropout_p, is_causal=is_causal)
        return Built(fn, leaves, _from_bhnd)


_COMPILED_FLEX = None


def flex_attention_fn(device):
    """torch.compile(flex_attention) on CUDA (compiled once, re-specialized per shape); eager on CPU."""
    global _COMPILED_FLEX
    from torch.nn.attention.flex_attention import flex_attention
    if device.type != "cuda":
        return flex_attention
    if _COMPILED_FLEX is None:
        import torch._dynamo.config as dynamo_config
        # one specialization per benchmarked shape: lift the recompile limit (default 8)
        for key in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo_config, key):
                setattr(dynamo_config, key, max(getattr(dynamo_config, key), 256))
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


def _sorted_indices(mask):
    """Per row of a (..., nq, nk) bool block mask: the count and the nonzero columns first."""
    counts = mask.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts, order


def flex_block_mask(seqlen, block=128, causal=False, lengths=None, layout=None, device="cpu",
                    window=None):
    """A FlexAttention BlockMask built in block space (never materializes N x N).

    layout: (nb, nb) bool block layout (block (i, j) allowed iff layout[i, j]); causal: token-level
    causal mask (top-left aligned); lengths: (B,) valid key lengths (key padding); window: query i
    sees keys i - window .. i + window (sliding window). Blocks every constraint keeps whole are
    "full" (compiled flex evaluates no mask_mod there); those cut by causal, the window or padding
    are "partial". mask_mod also repeats the layout per token, since eager (uncompiled) flex
    ignores the block lists. Returns None when nothing is masked.
    """
    from torch.nn.attention.flex_attention import BlockMask
    device = torch.device(device)
    nb = -(-seqlen // block)
    if layout is None and not causal and lengths is None and window is None:
        return None
    qb = torch.arange(nb, device=device)[:, None]
    kb = torch.arange(nb, device=device)[None, :]
    nonempty = torch.ones(1, nb, nb, dtype=torch.bool, device=device)
    full = nonempty.clone()
    lay = None
    if layout is not None:
        if tuple(layout.shape) != (nb, nb):
            raise ValueError(f"layout has shape {tuple(layout.shape)}, expected ({nb}, {nb}) for "
                             f"seqlen {seqlen} at block {block}")
        lay = layout.to(device=device, dtype=torch.bool)[None]
        nonempty, full = nonempty & lay, full & lay
    if causal:
        nonempty, full = nonempty & (kb <= qb), full & (kb < qb)
    if window is not None:  # key minus query offsets within a block pair span this range
        lowest, highest = (kb - qb) * block - (block - 1), (kb - qb) * block + (block - 1)
        nonempty = nonempty & (highest >= -window) & (lowest <= window)
        full = full & (lowest >= -window) & (highest <= window)
    if lengths is not None:
        lengths = lengths.to(device)
        lens = lengths[:, None, None]
        nonempty = nonempty & (kb * block < lens)
        full = full & ((kb + 1) * block <= lens)
    partial = nonempty & ~full

    def mask_mod(b, h, q_idx, kv_idx):
        keep = q_idx >= 0
        if lay is not None:  # compiled flex skips absent blocks; eager flex needs it per token
            keep = keep & lay[0, q_idx // block, kv_idx // block]
        if causal:
            keep = keep & (q_idx >= kv_idx)
        if window is not None:
            keep = keep & (kv_idx >= q_idx - window) & (kv_idx <= q_idx + window)
        if lengths is not None:
            keep = keep & (kv_idx < lengths[b])
        return keep

    counts, idx = _sorted_indices(partial)
    full_counts, full_idx = _sorted_indices(full)
    return BlockMask.from_kv_blocks(counts[:, None], idx[:, None], full_counts[:, None],
                                    full_idx[:, None], BLOCK_SIZE=block,
                                    mask_mod=mask_mod,
                                    seq_lengths=(seqlen, seqlen))


class FlexImpl(AttentionImpl):
    name = "flex"
    applies_window = True

    def check_support(self, case):
        if case.dropout_p > 0:
            raise Unsupported("FlexAttention has no dropout")
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except ImportError as exc:
            raise Unsupported(f"FlexAttention is not available in this torch ({exc})") from exc

    def build(self, case, q, k, v, dropout_p):
        attn = flex_attention_fn(case.device)
        leaves = _leaves_bhnd(q, k, v)
        block_mask = flex_block_mask(case.seqlen, causal=case.causal, lengths=case.lengths,
                                     device=case.device, window=case.window)
        return Built(lambda: attn(*leaves, block_mask=block_mask), leaves, _from_bhnd)


class LocalImpl(RegistryImpl):
    """Our sliding-window attention (``local``) at the window of each case."""
    applies_window = True

    def __init__(self):
        super().__init__("local", "local")

    def check_support(self, case):
        if case.window is None:
            raise Unsupported("local needs a window (fa-bench attention --window)")
        super().check_support(case)

    def build(self, case, q, k, v, dropout_p):
        from fa_train.attention import build_attention
        self.attention = build_attention({"impl": "local", "window_left": case.window,
                                          "window_right": case.window})
        return super().build(case, q, k, v, dropout_p)


def default_impls():
    return {
        "flash": RegistryImpl("flash", "flash"),
        "flash_deterministic": RegistryImpl("flash_deterministic",
                                            {"impl": "flash", "deterministic": True}),
        "standard": RegistryImpl("standard", "standard"),
        "sdpa_flash": SDPAImpl("sdpa_flash", "FLASH_ATTENTION"),
        "sdpa_cudnn": SDPAImpl("sdpa_cudnn", "CUDNN_ATTENTION"),
        "sdpa_efficient": SDPAImpl("sdpa_efficient", "EFFICIENT_ATTENTION"),
        "flex": FlexImpl(),
        **{name: BaselineImpl(name) for name in BASELINE_IMPL_NAMES},
        "local": LocalImpl(),
    }
