"""Bidirectional Transformer encoder shared by BERT, the LRA classifier and the long-document model.

One layer = self-attention (through fa_train.attention) + feed-forward, pre-LN or post-LN.
Input is padded (B, N, D) with a key-padding mask, or packed (T, D) with cu_seqlens/max_seqlen
(BERT's unpadded path: no FLOPs are spent on padding when attention runs varlen natively).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from fa_train.models.layer_norm import LayerNorm

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_head, attn_dropout, attention, bias=True):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} must be divisible by n_head {n_head}")
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = attn_dropout
        self.attention = attention

    def forward(self, x, key_padding_mask=None, cu_seqlens=None, max_seqlen=None):
        *lead, d = x.shape
        qkv = self.qkv(x).view(*lead, 3, self.n_head, d // self.n_head)
        y = self.attention.packed(qkv, causal=False,
                                  dropout_p=self.attn_dropout if self.training else 0.0,
                                  key_padding_mask=key_padding_mask, cu_seqlens=cu_seqlens,
                                  max_seqlen=max_seqlen)
        return self.out(y.reshape(*lead, d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_ff, attention, dropout=0.1, attn_dropout=0.1,
                 activation="gelu", prenorm=True, layer_norm_eps=1e-5, norm_impl="auto"):
        super().__init__()
        self.prenorm = prenorm
        self.attn = SelfAttention(d_model, n_head, attn_dropout, attention)
        self.ln1 = LayerNorm(d_model, eps=layer_norm_eps, impl=norm_impl)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.ln2 = LayerNorm(d_model, eps=layer_norm_eps, impl=norm_impl)
        self.drop = nn.Dropout(dropout)
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {sorted(ACTIVATIONS)}")
        self.act = ACTIVATIONS[activation]

    def forward(self, x, key_padding_mask=None, cu_seqlens=None, max_seqlen=None):
        if self.prenorm:
            x = x + self.drop(self.attn(self.ln1(x), key_padding_mask, cu_seqlens, max_seqlen))
            return x + self.drop(self.ff2(self.drop(self.act(self.ff1(self.ln2(x))))))
        x = self.ln1(x + self.drop(self.attn(x, key_padding_mask, cu_seqlens, max_seqlen)))
        return self.ln2(x + self.drop(self.ff2(self.drop(self.act(self.ff1(x))))))


class Encoder(nn.Module):
    """A stack of EncoderLayers (+ final LayerNorm when pre-LN)."""

    def __init__(self, n_layer, d_model, n_head, d_ff, attention, dropout=0.1, attn_dropout=0.1,
                 activation="gelu", prenorm=True, layer_norm_eps=1e-5,
                 activation_checkpointing=False, norm_impl="auto"):
        super().__init__()
        self.layers = nn.ModuleList([
            EncoderLayer(d_model, n_head, d_ff, attention, dropout, attn_dropout, activation,
                         prenorm, layer_norm_eps, norm_impl) for _ in range(n_layer)])
        self.ln_f = (LayerNorm(d_model, eps=layer_norm_eps, impl=norm_impl) if prenorm
                     else nn.Identity())
        self.activation_checkpointing = activation_checkpointing

    def forward(self, x, key_padding_mask=None, cu_seqlens=None, max_seqlen=None):
        for layer in self.layers:
            if self.activation_checkpointing and self.training:
                x = checkpoint(layer, x, key_padding_mask, cu_seqlens, max_seqlen,
                               use_reentrant=False)
            else:
                x = layer(x, key_padding_mask, cu_seqlens, max_seqlen)
        return self.ln_f(x)


def init_bert_weights(module, std=0.02):
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def encoder_flops_shape(model, n_layer, n_head, d_model) -> dict:
    return dict(n_params=sum(p.numel() for p in model.parameters()), n_layers=n_layer,
                n_heads=n_head, head_dim=d_model // n_head)
