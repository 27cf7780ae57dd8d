"""The attention registry: every name builds, bad names and keys fail in one line, `supports`
declarations are honoured, auto resolves per device, blocksparse reports its layout."""
import os

import pytest
import torch

from fa_train.attention import (ATTENTION_CLASSES, FEATURES, Attention, attention_names,
                                build_attention)
from fa_train.errors import UserError
from kernels.layouts import LayoutSpec

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(b=2, n=32, h=2, h_kv=2, d=16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, n, h, d, generator=g).to(DEV)
    return q, *(torch.randn(b, n, h_kv, d, generator=g).to(DEV) for _ in range(2))


def test_every_name_builds_its_class():
    assert {"standard", "sdpa", "flash", "blocksparse", "auto"} <= set(attention_names())
    for name in attention_names():
        attn = build_attention(name, max_seq_len=64)  # linformer sizes its projections by it
        assert isinstance(attn, ATTENTION_CLASSES[name]) and attn.name == name
        assert set(attn.supports) <= set(FEATURES)


def test_unknown_name_is_one_line_listing_the_valid_names():
    with pytest.raises(ValueError) as err:
        build_attention("flashy")
    message = str(err.value)
    assert "\n" not in message and "'flashy'" in message
    assert all(name in message for name in attention_names())


def test_unknown_config_key_is_one_line_listing_the_valid_keys():
    with pytest.raises(ValueError, match=r"unknown attention config key\(s\) \['blok_size'\].*"
                                         r"block_size"):
        build_attention({"impl": "blocksparse", "blok_size": 64})


@pytest.mark.parametrize("options, message", [
    ({"block_size": 0}, "attention.block_size must be >= 1, got 0"),
    ({"block_size": "64"}, "attention.block_size must be an int, got str '64'"),
    ({"butterfly_size": 3}, "attention.butterfly_size must be a power of two (in blocks), got 3"),
])
def test_a_value_the_layout_refuses_is_a_user_error_naming_the_key(options, message):
    with pytest.raises(UserError) as err:
        build_attention({"impl": "blocksparse", **options})
    assert str(err.value) == message


def test_config_keys_reach_their_implementation():
    attn = build_attention({"impl": "blocksparse", "block_size": 64, "butterfly_size": 4,
                            "n_factors": 1, "global_size": 1, "local_window": 2})
    assert attn.config == LayoutSpec(64, 4, 1, 1, 2)
    assert build_attention({"impl": "flash", "deterministic": True}).config.deterministic
    # another implementation's keys are accepted (an `attention.impl=...` override keeps them)
    assert build_attention({"impl": "sdpa", "block_size": 64}).name == "sdpa"
    assert build_attention("flash", deterministic=True).config.deterministic


def test_configs_of_the_attention_group_build():
    import pathlib

    import yaml
    root = pathlib.Path(__file__).resolve().parents[3] / "configs" / "attention"
    for path in sorted(root.glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        attn = build_attention(cfg, max_seq_len=64)
        # a layout config (attention=longformer, ...) runs blocksparse over its pattern
        assert attn.name == path.stem or (attn.name == "blocksparse"
                                          and path.stem.endswith(attn.config.layout))


def test_auto_resolves_per_device():
    attn = build_attention("auto")
    assert attn.resolved("cpu") == "sdpa" and attn.resolved("cuda") == "flash"
    assert attn.resolved(None) == "sdpa"
    assert attn.supports_varlen("cuda") and not attn.supports_varlen("cpu")
    assert build_attention("standard").resolved("cuda") == "standard"


class _CausalOnly(Attention):
    name = "causal_only"
    supports = frozenset({"causal"})

    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        return q


@pytest.mark.parametrize("kwargs, feature", [
    (dict(dropout_p=0.1), "dropout"),
    (dict(key_padding_mask=torch.ones(2, 32, dtype=torch.bool)), "a key padding mask"),
])
def test_a_feature_not_declared_is_refused_by_name(kwargs, feature):
    q, k, v = _qkv()
    attn = _CausalOnly()
    assert attn(q, k, v, causal=True) is q
    with pytest.raises(ValueError, match=f"'causal_only' does not support {feature}"):
        attn(q, k, v, **kwargs)


@pytest.mark.parametrize("name", ["standard", "sdpa"])
def test_gqa_is_refused_where_not_declared(name):
    q, k, v = _qkv(h=4, h_kv=2)
    assert "gqa" not in ATTENTION_CLASSES[name].supports
    with pytest.raises(ValueError, match=f"'{name}' does not support grouped-query attention"):
        build_attention(name)(q, k, v)


def test_stats_are_empty_before_a_call_and_for_dense_implementations():
    assert build_attention({"impl": "blocksparse"}).stats() == {}
    q, k, v = _qkv()
    attn = build_attention("standard")
    attn(q, k, v)
    assert attn.stats() == {}


@pytest.mark.skipif(not INTERPRET, reason="needs CUDA or TRITON_INTERPRET=1")
def test_blocksparse_stats_describe_the_last_calls_layout():
    spec = dict(block_size=16, butterfly_size=2, global_size=0)
    attn = build_attention({"impl": "blocksparse", **spec})
    q, k, v = _qkv(b=1, n=64, h=1, h_kv=1)
    attn(q, k, v)
    layout = LayoutSpec(**spec).build(64)
    assert attn.stats() == dict(blocksparse_seqlen=64, blocksparse_block_size=16,
                                blocksparse_density=layout.float().mean().item(),
                                blocksparse_causal=False)
    attn(q[:, :32], k[:, :32], v[:, :32], causal=True)
    causal = LayoutSpec(**spec).build(32, causal=True)
    assert attn.stats()["blocksparse_density"] == causal.float().mean().item()
    assert attn.stats()["blocksparse_seqlen"] == 32 and attn.stats()["blocksparse_causal"]
    assert attn.index(64, q.device) is attn.index(64, q.device)  # block lists built once
