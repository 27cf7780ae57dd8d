"""BERT (base 110M / large 340M) with the masked-LM head and an optional next-sentence head.

Post-LN encoder as in the original BERT. With an attention that runs packed input natively
(``flash`` / ``auto`` on CUDA), padding is removed after the embeddings and the whole encoder runs
on (total_tokens, D) with cu_seqlens (the MLPerf "unpadded" BERT), except under torch.compile;
other implementations run padded with a key-padding mask. Either way ``encode`` returns padded
(B, N, D) hidden states.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fa_train.attention import build_attention, pad_input, unpad_input
from fa_train.errors import check_choice, check_flags, check_float, check_model_shape
from fa_train.models.encoder import Encoder, encoder_flops_shape, init_bert_weights
from fa_train.models.layer_norm import LayerNorm

BERT_PRESETS = {
    "bert-base": dict(n_layer=12, n_head=12, d_model=768, d_ff=3072),
    "bert-large": dict(n_layer=24, n_head=16, d_model=1024, d_ff=4096),
}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    max_seq_len: int = 512
    type_vocab_size: int = 2
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072
    dropout: float = 0.1
    attn_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    norm_impl: str = "auto"           # LayerNorm kernels: fa_train.models.layer_norm
    pad_token_id: int = 0
    nsp: bool = False                 # next-sentence-prediction head
    unpad: str | bool = "auto"       # "auto": unpad when attention runs varlen natively (flash)
    activation_checkpointing: bool = False
    attention: Any = field(default_factory=lambda: {"impl": "auto"})


class BertForPreTraining(nn.Module):
    def __init__(self, config: BertConfig | None = None, preset: str | None = None, **kwargs):
        super().__init__()
        if preset is not None:
            kwargs = {**BERT_PRESETS[check_choice("model.preset", preset, sorted(BERT_PRESETS))],
                      **kwargs}
        cfg = config or BertConfig(**kwargs)
        check_flags("model", cfg)
        check_model_shape(cfg.n_layer, cfg.n_head, cfg.d_model, d_ff=cfg.d_ff,
                          vocab_size=cfg.vocab_size, max_seq_len=cfg.max_seq_len)
        for key in ("dropout", "attn_dropout"):
            check_float(f"model.{key}", getattr(cfg, key), 0.0, 1.0, high_open=True)
        self.config = cfg
        self.attention = build_attention(cfg.attention, max_seq_len=cfg.max_seq_len)
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embeddings = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.emb_ln = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, impl=cfg.norm_impl)
        self.emb_drop = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_ff, self.attention,
                               cfg.dropout, cfg.attn_dropout, "gelu", prenorm=False,
                               layer_norm_eps=cfg.layer_norm_eps, norm_impl=cfg.norm_impl,
                               activation_checkpointing=cfg.activation_checkpointing)
        # MLM head: dense -> GELU -> LayerNorm -> decoder tied to the word embeddings
        self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm_ln = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, impl=cfg.norm_impl)
        self.mlm_decoder = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.mlm_decoder.weight = self.word_embeddings.weight
        if cfg.nsp:
            self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
            self.nsp_head = nn.Linear(cfg.d_model, 2)
        self.apply(init_bert_weights)

    def flops_shape(self) -> dict:
        c = self.config
        return encoder_flops_shape(self, c.n_layer, c.n_head, c.d_model)

    def _use_unpad(self, device) -> bool:
        if self.config.unpad == "auto":
            # compiled graphs stay padded: unpadding makes the token count data-dependent, which
            # breaks the graph and recompiles it for new counts (kernels/NOTES.md, round 20)
            return self.attention.supports_varlen(device) and not torch.compiler.is_compiling()
        return bool(self.config.unpad)

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, packing=None):
        """Padded (B, N, D) hidden states. packing: (positions of the real tokens in the flattened
        batch, cu_seqlens, max_seqlen) as the batch computed them on the host, for the unpadded
        path; without it they are found on the device, where the count makes the host wait."""
        b, n = input_ids.shape
        if n > self.config.max_seq_len:
            raise ValueError(f"sequence length {n} exceeds model.max_seq_len {self.config.max_seq_len}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(n, device=input_ids.device)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)[None]
             + self.token_type_embeddings(token_type_ids))
        x = self.emb_drop(self.emb_ln(x))
        if attention_mask is None:
            return self.encoder(x)
        mask = attention_mask.to(torch.bool)
        if self._use_unpad(input_ids.device):
            if packing is None:
                xu, idx, cu, mx = unpad_input(x, mask)
            else:
                idx, cu, mx = packing
                xu = x.flatten(0, 1).index_select(0, idx)
            h = self.encoder(xu, cu_seqlens=cu, max_seqlen=mx)
            return pad_input(h, idx, b, n)
        return self.encoder(x, key_padding_mask=mask)

    def mlm_logits(self, hidden):
        return self.mlm_decoder(self.mlm_ln(F.gelu(self.mlm_dense(hidden))))

    def nsp_logits(self, hidden):
        if not self.config.nsp:
            return None
        return self.nsp_head(torch.tanh(self.pooler(hidden[:, 0])))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """MLM logits (B, N, V) and NSP logits (B, 2) or None."""
        h = self.encode(input_ids, attention_mask, token_type_ids)
        return self.mlm_logits(h), self.nsp_logits(h)
