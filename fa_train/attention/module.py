"""Attention implementations that hold tensors of their own (learned projections, random
features): an `Attention` that is also an `nn.Module`, so a model that keeps it as an attribute
trains, moves, casts and saves those tensors with its own. A model builds one attention object and
shares it across its layers, so such tensors are shared by all layers and heads."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from fa_train.attention.base import Attention
from fa_train.errors import check_int


class ModuleAttention(Attention, nn.Module):
    """`Attention` with nn.Module state; called with the common signature (Attention.__call__)."""

    def __init__(self, config=None):
        nn.Module.__init__(self)
        Attention.__init__(self, config)

    __call__ = Attention.__call__
    __repr__ = Attention.__repr__


def check_int_options(config, **lows):
    """Each named field of an options dataclass an int >= its low (None allowed for fields whose
    low is given as (low, None)); one line naming ``attention.<field>`` otherwise."""
    for name, low in lows.items():
        value = getattr(config, name)
        if isinstance(low, tuple):
            if value is None:
                continue
            low = low[0]
        check_int(f"attention.{name}", value, low)


def at_least_float32(t):
    """`t` in float32 when it is a half type (softmax statistics, feature sums), else as it is."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def heads_first(*tensors, upcast=False):
    """(B, N, H, d) tensors as (B, H, N, d); `upcast`: in at least float32."""
    return [at_least_float32(t.transpose(1, 2)) if upcast else t.transpose(1, 2)
            for t in tensors]


def scale_of(softmax_scale, head_dim):
    """The softmax temperature: `softmax_scale`, or 1 / sqrt(head_dim) when None."""
    return softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
