"""GPT-2 (small 124M / medium 355M / large 774M), nanoGPT-style and readable in one sitting.

Learned absolute positions (or none: ``pos_emb``), tied input/output embeddings, pre-LayerNorm
blocks, GELU MLP, dropout 0.1, context length up to 64K, optional activation checkpointing.
Attention goes through fa_train.attention, so ``attention=standard|sdpa|flash|blocksparse`` changes
nothing else. ``document_mask``: in training and evaluation a token attends only to its own document
(the tokens after the last ``eot_id`` before it in its window), as packed variable-length sequences
(``flash`` runs them natively; the others pad them); positions stay those of the window.

Inference with a KV cache (fa_train.models.kv_cache): ``cache = model.new_cache(B, capacity)``,
``model.prefill(prompts, lengths, cache)`` over right-padded prompts (the training attention
path), then ``model.decode(tokens, cache)`` per step (``tree_parents`` for a token tree) and
``cache.advance(n)``; fa_train.inference builds sampling, CUDA-graph decode steps and
speculative decoding on these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from fa_train.attention import build_attention
from fa_train.attention.cache import new_token_visibility
from fa_train.errors import UserError, check_choice, check_flags, check_float, check_int, check_model_shape
from fa_train.models.kv_cache import KVCache, LayerCache
from fa_train.models.layer_norm import LayerNorm

LOSS_IMPLS = ("auto", "fused", "torch")
POS_EMBS = ("learned", "none")

GPT2_PRESETS = {
    "gpt2-small": dict(n_layer=12, n_head=12, d_model=768),    # 124M
    "gpt2-medium": dict(n_layer=24, n_head=16, d_model=1024),  # 355M
    "gpt2-large": dict(n_layer=36, n_head=20, d_model=1280),   # 774M
}


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    vocab_multiple: int = 64         # embedding rows padded to a multiple (fast lm_head matmul)
    max_seq_len: int = 1024          # context length (learned position table size), up to 64K
    pos_emb: str = "learned"         # "learned" (GPT-2) | "none" (causal attention alone tells position)
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    dropout: float = 0.1             # embedding, residual and attention-probability dropout
    bias: bool = True
    activation_checkpointing: bool = False
    loss_impl: str = "auto"          # fused (kernels.cross_entropy), torch, or auto: fused on CUDA
    norm_impl: str = "auto"          # LayerNorm kernels: fa_train.models.layer_norm
    document_mask: bool = False      # attention within documents only (split at eot_id)
    eot_id: int | None = None        # the end-of-document token (from the data)
    attention: Any = field(default_factory=lambda: {"impl": "auto"})


@dataclass(frozen=True)
class Documents:
    """The documents of a batch of windows flattened to one packed sequence: ``cu_seqlens``
    (int32, documents + 1) and ``max_len``, the window length, which bounds every document (a
    bound that stays the same from batch to batch, so a compiled model is not specialized on it)."""
    cu_seqlens: torch.Tensor
    max_len: int

    @classmethod
    def split(cls, idx: torch.Tensor, eot_id: int) -> "Documents":
        """Each window (row of idx) starts a document, and so does the token after each eot_id."""
        b, n = idx.shape
        starts = torch.ones_like(idx, dtype=torch.bool)
        starts[:, 1:] = idx[:, :-1] == eot_id
        cu = torch.cat([starts.flatten().nonzero().flatten(), idx.new_tensor([b * n])])
        return cls(cu.to(torch.int32), n)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, attention):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.attn_dropout = cfg.dropout
        self.attention = attention

    def forward(self, x, cache: LayerCache | None = None, documents: Documents | None = None):
        b, n, c = x.shape
        qkv = self.c_attn(x).view(b, n, 3, self.n_head, c // self.n_head)
        dropout_p = self.attn_dropout if self.training else 0.0
        if cache is not None:
            y = cache.attend(self.attention, qkv)
        elif documents is not None:
            y = self.attention.packed(qkv.flatten(0, 1), causal=True, dropout_p=dropout_p,
                                      cu_seqlens=documents.cu_seqlens, max_seqlen=documents.max_len)
        else:
            y = self.attention.packed(qkv, causal=True, dropout_p=dropout_p)
        return self.resid_dropout(self.c_proj(y.reshape(b, n, c)))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, attention):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.d_model, bias=cfg.bias, impl=cfg.norm_impl)
        self.attn = CausalSelfAttention(cfg, attention)
        self.ln_2 = LayerNorm(cfg.d_model, bias=cfg.bias, impl=cfg.norm_impl)
        self.mlp = MLP(cfg)

    def forward(self, x, cache: LayerCache | None = None, documents: Documents | None = None):
        x = x + self.attn(self.ln_1(x), cache, documents)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 language model: ``logits = model(idx)`` with idx (B, N) token ids."""

    def __init__(self, config: GPTConfig | None = None, preset: str | None = None, **kwargs):
        super().__init__()
        if preset is not None:
            kwargs = {**GPT2_PRESETS[check_choice("model.preset", preset, sorted(GPT2_PRESETS))],
                      **kwargs}
        cfg = config or GPTConfig(**kwargs)
        check_flags("model", cfg)
        check_model_shape(cfg.n_layer, cfg.n_head, cfg.d_model, vocab_size=cfg.vocab_size,
                          vocab_multiple=cfg.vocab_multiple, max_seq_len=cfg.max_seq_len)
        check_float("model.dropout", cfg.dropout, 0.0, 1.0, high_open=True)
        check_choice("model.loss_impl", cfg.loss_impl, LOSS_IMPLS)
        check_choice("model.pos_emb", cfg.pos_emb, POS_EMBS)
        if cfg.document_mask and cfg.eot_id is None:
            raise UserError("model.document_mask needs model.eot_id, the end-of-document token id "
                            "(the language-model data provides it; null takes it from there)")
        if cfg.eot_id is not None:
            check_int("model.eot_id", cfg.eot_id, 0, cfg.vocab_size - 1)
        self.config = cfg
        self.attention = build_attention(cfg.attention, max_seq_len=cfg.max_seq_len)
        self.attention.check_call(causal=True)   # a language model: refuse non-causal methods now
        padded_vocab = -(-cfg.vocab_size // cfg.vocab_multiple) * cfg.vocab_multiple
        self.wte = nn.Embedding(padded_vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos_emb == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg, self.attention) for _ in range(cfg.n_layer)])
        self.ln_f = LayerNorm(cfg.d_model, bias=cfg.bias, impl=cfg.norm_impl)
        self.lm_head = nn.Linear(cfg.d_model, padded_vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameters of the model (the embedding's padding rows not counted)."""
        n = sum(p.numel() for p in self.parameters())
        n -= (self.wte.num_embeddings - self.config.vocab_size) * self.config.d_model
        return n - self.wpe.weight.numel() if non_embedding and self.wpe is not None else n

    def _embed(self, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        return x if self.wpe is None else x + self.wpe(pos)

    def flops_shape(self) -> dict:
        """Numbers for fa_train.metrics.flops.transformer_flops_per_token."""
        c = self.config
        return dict(n_params=self.num_params(), n_layers=c.n_layer, n_heads=c.n_head,
                    head_dim=c.d_model // c.n_head)

    def _fused_loss(self, x):
        impl = self.config.loss_impl
        return impl == "fused" or (impl == "auto" and x.is_cuda)

    def new_cache(self, batch: int, capacity: int, dtype: torch.dtype | None = None,
                  device=None) -> KVCache:
        """An empty KV cache for `batch` rows of up to `capacity` tokens."""
        c = self.config
        check_int("capacity", capacity)
        w = self.wte.weight
        return KVCache.empty(c.n_layer, batch, capacity, c.n_head, c.d_model // c.n_head,
                             dtype or w.dtype, device or w.device)

    def _cached_logits(self, x, cache: KVCache, prefill: bool, tree_parents=None):
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layer(i, prefill, tree_parents))
        return self.lm_head(self.ln_f(x))[..., :self.config.vocab_size]

    @torch.no_grad()
    def prefill(self, idx: torch.Tensor, lengths: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Fill an empty `cache` with right-padded prompts idx (B, N) of `lengths` (B,) tokens;
        returns the logits (B, vocab_size) after each prompt's last token."""
        n = idx.shape[1]
        if n > cache.capacity:
            raise ValueError(f"prompt of {n} tokens exceeds the KV cache capacity {cache.capacity}")
        pos = torch.arange(n, device=idx.device)
        logits = self._cached_logits(self._embed(idx, pos), cache, prefill=True)
        cache.seqlens.copy_(lengths)
        rows = torch.arange(idx.shape[0], device=idx.device)
        return logits[rows, lengths.to(device=idx.device, dtype=torch.long) - 1]

    @torch.no_grad()
    def decode(self, idx: torch.Tensor, cache: KVCache, tree_parents: torch.Tensor | None = None,
               check_positions: bool = True) -> torch.Tensor:
        """Logits (B, Nq, vocab_size) of new tokens idx (B, Nq) after the cached ones: a chain, or
        a tree by `tree_parents` (Nq,) (-1: a root, placed right after the cache). Their keys and
        values are written at cache.seqlens; `cache.advance` counts the ones kept.
        ``check_positions=False`` skips the context check (a device sync) for a caller that has
        bounded the positions of the whole request already, as a captured CUDA graph needs."""
        depth = torch.arange(idx.shape[1], device=idx.device)
        if tree_parents is not None:  # a new token's ancestors among the new ones
            depth = new_token_visibility(idx.shape[1], tree_parents, idx.device).sum(dim=1) - 1
        pos = cache.seqlens.to(torch.long)[:, None] + depth[None, :]
        if check_positions and int(pos.max()) >= self.config.max_seq_len:
            raise ValueError(f"position {int(pos.max())} is beyond the model's context "
                             f"(model.max_seq_len={self.config.max_seq_len})")
        return self._cached_logits(self._embed(idx, pos), cache, False, tree_parents)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, N, vocab_size); with ``targets`` (B, N; -100 = ignored) the mean next-token
        cross entropy instead: by kernels.cross_entropy (``loss_impl`` fused, or auto on CUDA),
        which never holds float32 logits, or by PyTorch in float32 inside the same graph."""
        b, n = idx.shape
        if n > self.config.max_seq_len:
            raise ValueError(f"sequence length {n} exceeds model.max_seq_len "
                             f"{self.config.max_seq_len}")
        pos = torch.arange(n, device=idx.device)
        x = self.drop(self._embed(idx, pos))
        documents = Documents.split(idx, self.config.eot_id) if self.config.document_mask else None
        for block in self.blocks:
            if self.config.activation_checkpointing and self.training:
                x = checkpoint(block, x, None, documents, use_reentrant=False)
            else:
                x = block(x, documents=documents)
        x = self.ln_f(x)
        if targets is not None and self._fused_loss(x):
            dtype = (torch.get_autocast_dtype(x.device.type)
                     if torch.is_autocast_enabled(x.device.type) else x.dtype)
            from kernels.cross_entropy import linear_cross_entropy  # Triton: only on this path
            return linear_cross_entropy(x.reshape(b * n, -1).to(dtype),
                                        self.lm_head.weight.to(dtype), targets.reshape(-1),
                                        self.config.vocab_size)
        logits = self.lm_head(x)[..., :self.config.vocab_size]
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=-100)
