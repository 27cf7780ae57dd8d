"""auto: flash on CUDA tensors, sdpa everywhere else, chosen per call from the input's device."""
from __future__ import annotations

from typing import Any, Mapping

import torch

from fa_train.attention.base import Attention
from fa_train.attention.flash import FlashAttention
from fa_train.attention.sdpa import SdpaAttention


class AutoAttention(Attention):
    name = "auto"
    supports = FlashAttention.supports & SdpaAttention.supports

    def __init__(self, on_cuda: Attention | None = None, elsewhere: Attention | None = None):
        super().__init__()
        self.on_cuda = on_cuda or FlashAttention()
        self.elsewhere = elsewhere or SdpaAttention()

    @classmethod
    def config_keys(cls):
        return FlashAttention.config_keys() | SdpaAttention.config_keys()

    @classmethod
    def from_config(cls, options: Mapping[str, Any]):
        return cls(FlashAttention.from_config(options), SdpaAttention.from_config(options))

    def choice(self, device) -> Attention:
        """The implementation that runs on `device` (None: not CUDA)."""
        on_cuda = device is not None and torch.device(device).type == "cuda"
        return self.on_cuda if on_cuda else self.elsewhere

    def resolved(self, device):
        return self.choice(device).name

    def supports_varlen(self, device):
        return self.choice(device).native_varlen

    def __call__(self, q, k, v, **kwargs):
        return self.choice(q.device)(q, k, v, **kwargs)

    def packed(self, qkv, **kwargs):
        return self.choice(qkv.device).packed(qkv, **kwargs)

    def attend_cache(self, q, *args, **kwargs):
        return self.choice(q.device).attend_cache(q, *args, **kwargs)

    def __repr__(self):
        return f"AutoAttention(on_cuda={self.on_cuda!r}, elsewhere={self.elsewhere!r})"
