"""flash: our Triton FlashAttention kernels (kernels.flash_attn), packed variable-length input
natively, a packed qkv read in place, and KV-cache decoding by kernels.flash_attn_with_kvcache."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from fa_train.attention.base import Attention


def triton_runs_on(device) -> bool:
    """Whether Triton kernels run on `device`: CUDA, or the CPU under TRITON_INTERPRET=1."""
    return torch.device(device).type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def check_triton_device(x: torch.Tensor, impl: str):
    """A clear error for CPU tensors without the Triton interpreter."""
    if not triton_runs_on(x.device):
        raise RuntimeError(
            f"attention impl {impl!r} runs Triton kernels and needs CUDA tensors, got device "
            f"{x.device}; set TRITON_INTERPRET=1 to run them (slowly) on CPU, or use "
            f"attention=sdpa / attention=standard / attention=auto")


@dataclass(frozen=True)
class FlashOptions:
    """deterministic: a backward without atomics, bitwise reproducible (a dQ pass of its own)."""
    deterministic: bool = False


class FlashAttention(Attention):
    name = "flash"
    supports = frozenset({"causal", "key_padding_mask", "dropout", "gqa", "varlen"})
    native_varlen = True
    runs_triton = True
    Config = FlashOptions

    def kernel_options(self) -> dict:
        """Keyword arguments of this implementation's kernel calls beyond the common signature."""
        return dict(deterministic=self.config.deterministic)

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None,
                cu_seqlens=None, max_seqlen=None):
        check_triton_device(q, self.name)
        options = dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                       **self.kernel_options())
        if cu_seqlens is not None:
            from kernels import flash_attn_varlen_func
            cu = cu_seqlens.to(torch.int32)
            return flash_attn_varlen_func(q, k, v, cu, cu, int(max_seqlen), int(max_seqlen),
                                          **options)
        from kernels import flash_attn_func
        return flash_attn_func(q, k, v, key_padding_mask=key_padding_mask, **options)

    def packed(self, qkv, causal=False, dropout_p=0.0, key_padding_mask=None,
               softmax_scale=None, cu_seqlens=None, max_seqlen=None):
        """The kernels read q, k, v in place and write one packed gradient (no copies)."""
        self.check_call(causal, dropout_p, key_padding_mask, cu_seqlens)
        check_triton_device(qkv, self.name)
        options = dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                       **self.kernel_options())
        if cu_seqlens is not None:
            from kernels import flash_attn_varlen_qkvpacked_func
            return flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens.to(torch.int32),
                                                    int(max_seqlen), **options)
        from kernels import flash_attn_qkvpacked_func
        return flash_attn_qkvpacked_func(qkv, key_padding_mask=key_padding_mask, **options)

    def attend_cache(self, q, k, v, k_cache, v_cache, cache_seqlens, softmax_scale=None,
                     tree_parents=None):
        """kernels.flash_attn_with_kvcache (which writes k, v into the cache itself) where Triton
        runs (CUDA, or the CPU interpreter); elsewhere the PyTorch path of the base class."""
        if not triton_runs_on(q.device):
            return super().attend_cache(q, k, v, k_cache, v_cache, cache_seqlens, softmax_scale,
                                        tree_parents)
        from kernels import flash_attn_with_kvcache
        if tree_parents is not None:
            tree_parents = tree_parents.to(device=q.device, dtype=torch.int32)
        return flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v,
                                       cache_seqlens=cache_seqlens.to(torch.int32),
                                       softmax_scale=softmax_scale, causal=True,
                                       window_size=self.sliding_window(),
                                       tree_parents=tree_parents)
