"""Implementation names -> classes, and `build_attention`, which every model calls."""
from __future__ import annotations

from typing import Any

from fa_train.attention.auto import AutoAttention
from fa_train.attention.base import Attention
from fa_train.attention.blocksparse import BlocksparseAttention
from fa_train.attention.flash import FlashAttention
from fa_train.attention.linear import LinearAttention
from fa_train.attention.linformer import LinformerAttention
from fa_train.attention.performer import PerformerAttention
from fa_train.attention.reformer import ReformerAttention
from fa_train.attention.local import LocalAttention
from fa_train.attention.sdpa import SdpaAttention
from fa_train.attention.smyrf import SmyrfAttention
from fa_train.attention.standard import StandardAttention

ATTENTION_CLASSES: dict[str, type[Attention]] = {
    cls.name: cls for cls in (StandardAttention, SdpaAttention, FlashAttention,
                              BlocksparseAttention, AutoAttention, LocalAttention)}
# the approximate baselines of the paper's Table 3 and Figure 3
ATTENTION_CLASSES.update({cls.name: cls for cls in (
    LinformerAttention, LinearAttention, PerformerAttention, ReformerAttention, SmyrfAttention)})


def attention_names() -> list[str]:
    """Valid values of ``attention.impl``."""
    return sorted(ATTENTION_CLASSES)


def attention_class(name: str) -> type[Attention]:
    """The class registered as `name`; one line naming the valid choices otherwise."""
    if name not in ATTENTION_CLASSES:
        raise ValueError(f"unknown attention impl {name!r}; valid choices: {attention_names()}")
    return ATTENTION_CLASSES[name]


def config_keys() -> set[str]:
    """Every key an attention config may hold: ``impl`` and the options of all implementations
    (a config may carry options of another implementation than the one it names: overriding
    ``attention.impl`` keeps them valid)."""
    return {"impl"}.union(*(cls.config_keys() for cls in ATTENTION_CLASSES.values()))


def build_attention(cfg: Any = None, max_seq_len: int | None = None, **overrides) -> Attention:
    """Attention from a config: a name ('flash'), a mapping ({'impl': 'blocksparse',
    'block_size': 64, ...}, the shape of configs/attention/*.yaml) or an Attention.

    max_seq_len: the model's longest sequence, for implementations with parameters of that size
    (linformer); a config that names its own max_seq_len keeps it."""
    if isinstance(cfg, Attention):
        return cfg
    if cfg is None:
        cfg = {}
    if isinstance(cfg, str):
        cfg = {"impl": cfg}
    options = dict(cfg)
    options.update(overrides)
    if options.get("max_seq_len") is None and max_seq_len is not None:
        options["max_seq_len"] = max_seq_len
    unknown = sorted(set(options) - config_keys())
    if unknown:
        raise ValueError(f"unknown attention config key(s) {unknown}; valid keys: "
                         f"{sorted(config_keys())}")
    return attention_class(options.get("impl", "auto")).from_config(options)
