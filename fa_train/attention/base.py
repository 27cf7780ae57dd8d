"""The interface every attention implementation follows (see the package docstring)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

import torch

from fa_train.attention.cache import attend_cache_torch
from fa_train.attention.padding import run_varlen_by_padding
from fa_train.errors import UserError

# what a call may ask for; an implementation declares the subset it runs in `supports`
FEATURES = {
    "causal": "causal masking",
    "key_padding_mask": "a key padding mask",
    "dropout": "dropout",
    "gqa": "grouped-query attention (fewer k/v heads than q heads)",
    "varlen": "packed variable-length input (cu_seqlens)",
}


@dataclass(frozen=True)
class NoOptions:
    """The config of an implementation without options."""


class Attention:
    """A configured attention implementation, called with the common signature.

    Subclasses set `name`, `supports` (keys of FEATURES), `native_varlen` (packed input runs
    without padding), `runs_triton` (CUDA tensors needed, or the Triton interpreter) and `Config`
    (a dataclass of their options, built from the attention config's keys), and implement
    `forward`; `packed` may read a packed qkv in place; `attend_cache` (inference against a KV
    cache) runs in PyTorch unless an implementation has a kernel for it.
    """

    name: ClassVar[str] = ""
    supports: ClassVar[frozenset] = frozenset()
    native_varlen: ClassVar[bool] = False
    runs_triton: ClassVar[bool] = False
    Config: ClassVar[type] = NoOptions

    def __init__(self, config: Any = None):
        self.config = self.Config() if config is None else config

    @classmethod
    def config_keys(cls) -> set[str]:
        """The attention-config keys this implementation reads."""
        return {f.name for f in fields(cls.Config)}

    @classmethod
    def from_config(cls, options: Mapping[str, Any]) -> "Attention":
        """The implementation configured by the keys of `options` it reads (others are left to
        the implementations that read them); a value its Config refuses is a UserError that names
        ``attention.<key>``."""
        try:
            config = cls.Config(**{k: options[k] for k in cls.config_keys() if k in options})
        except UserError:
            raise
        except (TypeError, ValueError) as exc:  # the kernels' own checks (kernels.layouts)
            raise UserError(f"attention.{exc}") from exc
        return cls(config)

    def resolved(self, device) -> str:
        """The name of the implementation that runs on `device`."""
        return self.name

    def supports_varlen(self, device) -> bool:
        """True when packed (unpadded) input runs natively on `device`, without padding."""
        return self.native_varlen

    def stats(self) -> dict[str, Any]:
        """Metrics describing the last call (empty unless the implementation has some)."""
        return {}

    def check_call(self, causal=False, dropout_p=0.0, key_padding_mask=None, cu_seqlens=None,
                   gqa=False):
        """A clear error for a call asking for a feature this implementation lacks."""
        asked = {"causal": causal, "dropout": dropout_p > 0.0,
                 "key_padding_mask": key_padding_mask is not None,
                 "varlen": cu_seqlens is not None, "gqa": gqa}
        for feature, wanted in asked.items():
            if wanted and feature not in self.supports:
                raise UserError(f"attention impl {self.name!r} does not support "
                                 f"{FEATURES[feature]}; it supports: "
                                 f"{', '.join(sorted(self.supports))}")

    def __call__(self, q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None,
                 softmax_scale=None, cu_seqlens=None, max_seqlen=None) -> torch.Tensor:
        self.check_call(causal, dropout_p, key_padding_mask, cu_seqlens, q.shape[-2] != k.shape[-2])
        kwargs = dict(causal=causal, dropout_p=dropout_p, softmax_scale=softmax_scale)
        if cu_seqlens is None:
            return self.forward(q, k, v, key_padding_mask=key_padding_mask, **kwargs)
        if self.native_varlen:
            return self.forward(q, k, v, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, **kwargs)
        return run_varlen_by_padding(self.forward, q, k, v, cu_seqlens, max_seqlen, **kwargs)

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None,
                cu_seqlens=None, max_seqlen=None) -> torch.Tensor:
        """Attention over (B, N, H, d) tensors (packed (total, H, d) with cu_seqlens only when
        `native_varlen`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward")

    def packed(self, qkv, causal=False, dropout_p=0.0, key_padding_mask=None,
               softmax_scale=None, cu_seqlens=None, max_seqlen=None) -> torch.Tensor:
        """Attention over q, k, v packed along dim -3 of ``qkv`` ((B, N, 3, H, d), or
        (total, 3, H, d) with cu_seqlens), as a fused q/k/v projection makes them."""
        return self(*qkv.unbind(dim=-3), causal=causal, dropout_p=dropout_p,
                    key_padding_mask=key_padding_mask, softmax_scale=softmax_scale,
                    cu_seqlens=cu_seqlens, max_seqlen=max_seqlen)

    def attend_cache(self, q, k, v, k_cache, v_cache, cache_seqlens, softmax_scale=None,
                     tree_parents=None) -> torch.Tensor:
        """New tokens' q, k, v (B, Nq, H, d) against a KV cache (B, capacity, Hkv, d) holding
        cache_seqlens[b] tokens per row: k, v are written there first, then each new token sees
        the cache and the new tokens before it (or its ancestors in ``tree_parents``); see
        fa_train.attention.cache."""
        return attend_cache_torch(q, k, v, k_cache, v_cache, cache_seqlens, softmax_scale,
                                  tree_parents, self.sliding_window())

    def sliding_window(self) -> tuple[int, int]:
        """(left, right): keys a query sees each side of its diagonal, -1 = unbounded; a config
        with a ``window`` (a sliding-window implementation) gives it."""
        return tuple(getattr(self.config, "window", (-1, -1)))

    def __repr__(self):
        return f"{type(self).__name__}({self.config})"
