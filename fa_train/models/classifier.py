"""Sequence classifiers: the LRA Transformer and the RoBERTa-style long-document model.

LRAClassifier: token (vocab) or pixel (intensity/255 -> Linear) embedding, learned or sinusoidal
positions, optional CLS token, pre-LN (default) encoder, CLS or mean pooling, head
Linear(d, mlp) -> ReLU (or tanh: ``head_activation``) -> Linear(mlp, classes). As in the LRA
code, tokens equal to the pad id (black pixels) can be masked as padding (``mask_pad_tokens``)
and the token embedding drawn at another scale (``embed_init_std``). Two towers (Retrieval): one
shared encoder embeds both documents, [e1, e2, e1*e2, e1-e2] -> MLP -> classes.

Learned position tables of image tasks are 2D grids (image_size x image_size, row-major) and can be
interpolated to another resolution for Path-64 -> Path-X transfer (``resize_position_table``,
``load_with_position_interpolation``); the CLS token's own position row is kept as is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fa_train.attention import build_attention
from fa_train.errors import UserError, check_choice, check_flags, check_float, check_int, check_model_shape
from fa_train.models.encoder import Encoder, encoder_flops_shape, init_bert_weights
from fa_train.models.layer_norm import LayerNorm


@dataclass
class ClassifierConfig:
    num_classes: int = 2
    vocab_size: int = 256
    max_seq_len: int = 1024
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 512
    dropout: float = 0.1
    attn_dropout: float = 0.1
    activation: str = "gelu"
    prenorm: bool = True
    layer_norm_eps: float = 1e-5
    norm_impl: str = "auto"          # LayerNorm kernels: fa_train.models.layer_norm
    input_type: str = "token"        # "token" (nn.Embedding) | "pixel" (ids/255 -> Linear(1, d))
    pos_emb: str = "learned"         # "learned" | "sinusoidal" | "none"
    image_size: int | None = None    # side of the 2D grid for learned-table interpolation
    pool: str = "cls"                # "cls" | "mean"
    mlp_dim: int | None = None       # head hidden size (default d_model)
    head: str = "mlp"                # "mlp" (Linear-act-Linear) | "roberta" (dense-tanh-out)
    head_activation: str = "relu"    # the mlp head's: "relu" | "tanh" (never inactive for all)
    num_towers: int = 1              # 2 = two-tower retrieval head
    multi_label: bool = False        # only read by the task (BCE + micro-F1)
    pad_token_id: int = 0
    mask_pad_tokens: bool = False    # tokens equal to pad_token_id are padding (LRA: black pixels)
    embed_init_std: float | None = None  # token embedding init N(0, std); None: 0.02 like the rest
    position_repeat_base: int | None = None  # long-doc: tile a table of this many positions
    emb_layer_norm: bool = False     # RoBERTa-style LayerNorm after the embeddings
    activation_checkpointing: bool = False
    attention: Any = field(default_factory=lambda: {"impl": "auto"})


HEAD_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


def sinusoidal_table(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return table


def resize_position_table(table: torch.Tensor, new_size: int, old_size: int | None = None,
                          mode: str = "bicubic") -> torch.Tensor:
    """(old², d) row-major grid table -> (new², d): reshape to (d, old, old), interpolate, flatten."""
    n, d = table.shape
    old = old_size or int(round(math.sqrt(n)))
    if old * old != n:
        raise ValueError(f"position table with {n} rows is not a square grid")
    grid = table.t().reshape(1, d, old, old).float()
    kw = {} if mode == "nearest" else {"align_corners": False}
    out = F.interpolate(grid, size=(new_size, new_size), mode=mode, **kw)
    return out.reshape(d, new_size * new_size).t().to(table.dtype).contiguous()


def tile_position_table(table: torch.Tensor, new_len: int) -> torch.Tensor:
    """Repeat a (P, d) table to (new_len, d) (Longformer-style copy for longer documents)."""
    reps = -(-new_len // table.shape[0])
    return table.repeat(reps, 1)[:new_len].clone()


class SequenceClassifier(nn.Module):
    def __init__(self, config: ClassifierConfig | None = None, **kwargs):
        super().__init__()
        cfg = config or ClassifierConfig(**kwargs)
        check_flags("model", cfg)
        check_choice("model.pool", cfg.pool, ("cls", "mean"))
        check_choice("model.input_type", cfg.input_type, ("token", "pixel"))
        check_choice("model.pos_emb", cfg.pos_emb, ("learned", "sinusoidal", "none"))
        check_choice("model.head_activation", cfg.head_activation, tuple(HEAD_ACTIVATIONS))
        check_model_shape(cfg.n_layer, cfg.n_head, cfg.d_model, d_ff=cfg.d_ff,
                          max_seq_len=cfg.max_seq_len, num_classes=cfg.num_classes)
        if cfg.input_type == "token":
            check_int("model.vocab_size", cfg.vocab_size)
        for key in ("dropout", "attn_dropout"):
            check_float(f"model.{key}", getattr(cfg, key), 0.0, 1.0, high_open=True)
        side = cfg.image_size
        if side is not None and check_int("model.image_size", side) ** 2 != cfg.max_seq_len:
            raise UserError(f"model.image_size={cfg.image_size} is a grid of {cfg.image_size ** 2} "
                            f"positions but sequences have {cfg.max_seq_len} (model.max_seq_len); "
                            "leave model.image_size null to take the data's")
        self.config = cfg
        d = cfg.d_model
        self.attention = build_attention(  # the CLS token adds a position
            cfg.attention, max_seq_len=cfg.max_seq_len + (cfg.pool == "cls"))
        if cfg.input_type == "token":
            self.embed = nn.Embedding(cfg.vocab_size, d)
        else:
            self.embed = nn.Linear(1, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if cfg.pool == "cls" else None
        if cfg.pos_emb == "learned":
            self.pos_table = nn.Parameter(torch.randn(cfg.max_seq_len, d) * 0.02)
            self.cls_pos = nn.Parameter(torch.zeros(1, d)) if cfg.pool == "cls" else None
        else:
            self.register_buffer("pos_table", sinusoidal_table(cfg.max_seq_len, d)
                                 if cfg.pos_emb == "sinusoidal" else torch.zeros(cfg.max_seq_len, d),
                                 persistent=False)
            self.cls_pos = None
        self.emb_ln = (LayerNorm(d, eps=cfg.layer_norm_eps, impl=cfg.norm_impl)
                       if cfg.emb_layer_norm else nn.Identity())
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg.n_layer, d, cfg.n_head, cfg.d_ff, self.attention, cfg.dropout,
                               cfg.attn_dropout, cfg.activation, cfg.prenorm, cfg.layer_norm_eps,
                               cfg.activation_checkpointing, cfg.norm_impl)
        feat = d * (4 if cfg.num_towers == 2 else 1)
        hidden = cfg.mlp_dim or d
        if cfg.head == "roberta":
            self.head = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(feat, hidden), nn.Tanh(),
                                      nn.Dropout(cfg.dropout), nn.Linear(hidden, cfg.num_classes))
        else:
            act = HEAD_ACTIVATIONS[cfg.head_activation]
            self.head = nn.Sequential(nn.Linear(feat, hidden), act(),
                                      nn.Linear(hidden, cfg.num_classes))
        self.apply(init_bert_weights)
        if cfg.embed_init_std is not None:
            if cfg.embed_init_std <= 0:
                raise ValueError(f"model.embed_init_std must be > 0, got {cfg.embed_init_std}")
            nn.init.normal_(self.embed.weight, mean=0.0, std=cfg.embed_init_std)
        if cfg.pos_emb == "learned" and cfg.position_repeat_base and \
                cfg.max_seq_len > cfg.position_repeat_base:
            with torch.no_grad():
                self.pos_table.copy_(tile_position_table(
                    self.pos_table[: cfg.position_repeat_base], cfg.max_seq_len))

    def flops_shape(self) -> dict:
        c = self.config
        return encoder_flops_shape(self, c.n_layer, c.n_head, c.d_model)

    def embed_tokens(self, ids, mask):
        cfg = self.config
        n = ids.shape[1]
        if n > cfg.max_seq_len:
            raise ValueError(f"sequence length {n} exceeds model.max_seq_len {cfg.max_seq_len}")
        if cfg.input_type == "token":
            x = self.embed(ids)
        else:
            x = self.embed(ids.to(self.embed.weight.dtype).unsqueeze(-1) / 255.0)
        x = x + self.pos_table[:n].to(x.dtype)
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.shape[0], 1, -1)
            if self.cls_pos is not None:
                cls = cls + self.cls_pos
            x = torch.cat([cls.to(x.dtype), x], dim=1)
            if mask is not None:
                mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        return self.drop(self.emb_ln(x)), mask

    def pool(self, h, mask):
        if self.config.pool == "cls":
            return h[:, 0]
        if mask is None:
            return h.mean(dim=1)
        m = mask.to(h.dtype).unsqueeze(-1)
        return (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)

    def hidden(self, input_ids, attention_mask=None):
        """(encoder states (B, N, d) — N + 1 rows with a CLS token first —, the key mask used)."""
        mask = attention_mask.to(torch.bool) if attention_mask is not None else None
        if self.config.mask_pad_tokens:
            real = input_ids != self.config.pad_token_id
            mask = real if mask is None else mask & real
        x, mask = self.embed_tokens(input_ids, mask)
        return self.encoder(x, key_padding_mask=mask), mask

    def encode(self, input_ids, attention_mask=None):
        return self.pool(*self.hidden(input_ids, attention_mask))

    def token_logits(self, h):
        """Logits over the token vocabulary from encoder states, through the input embedding
        (tied, as BERT's masked-LM head): self-pretraining needs no weights of its own."""
        return F.linear(h, self.embed.weight)

    def forward(self, input_ids, attention_mask=None):
        """input_ids (B, N) -> logits (B, C); two towers: (B, 2, N) -> logits (B, C)."""
        if self.config.num_towers == 2:
            b, t, n = input_ids.shape
            flat_mask = attention_mask.reshape(b * t, n) if attention_mask is not None else None
            e = self.encode(input_ids.reshape(b * t, n), flat_mask).view(b, t, -1)
            e1, e2 = e[:, 0], e[:, 1]
            return self.head(torch.cat([e1, e2, e1 * e2, e1 - e2], dim=-1))
        return self.head(self.encode(input_ids, attention_mask))


def interpolated_state(model: SequenceClassifier, state_dict: dict, mode: str = "bicubic") -> dict:
    """`state_dict`, trained at another image size (e.g. Path-64 -> Path-X), fitted to `model`:
    a learned position grid of the model's width is interpolated to the model's image size (the CLS
    row, cls_pos, is kept); embedding rows past the model's vocabulary (the mask id of
    self-pretraining) are dropped. Any other difference is left for loading to report."""
    sd = dict(state_dict)
    rows = model.embed.weight.shape[0]
    if model.config.input_type == "token" and sd.get("embed.weight", torch.empty(0)).shape[0] > rows:
        sd["embed.weight"] = sd["embed.weight"][:rows]
    key = next((k for k in sd if k.endswith("pos_table")), None)
    own = getattr(model, "pos_table", None)
    if key is not None and own is not None and sd[key].shape != own.shape \
            and sd[key].ndim == 2 and sd[key].shape[1] == own.shape[1] \
            and math.isqrt(sd[key].shape[0]) ** 2 == sd[key].shape[0]:
        side = model.config.image_size or int(round(math.sqrt(model.config.max_seq_len)))
        sd[key] = resize_position_table(sd[key], side, mode=mode)
    return sd


def load_with_position_interpolation(model: SequenceClassifier, state_dict: dict,
                                     mode: str = "bicubic") -> SequenceClassifier:
    """Load weights trained at another image size into `model` (`interpolated_state`)."""
    model.load_state_dict(interpolated_state(model, state_dict, mode))
    return model


class LRAClassifier(SequenceClassifier):
    """The LRA Transformer baseline (pre-LN, CLS/mean pooling, MLP head)."""


class LongDocClassifier(SequenceClassifier):
    """RoBERTa-style long-document (multi-label) classifier: post-LN encoder, embedding LayerNorm,
    learned positions tiled from a ``position_repeat_base``-long table (default 512) to the document
    length, CLS pooling and a dense-tanh head."""

    def __init__(self, config: ClassifierConfig | None = None, **kwargs):
        defaults = dict(prenorm=False, emb_layer_norm=True, head="roberta", pool="cls",
                        pos_emb="learned", position_repeat_base=512, multi_label=True,
                        layer_norm_eps=1e-5)
        if config is None:
            config = ClassifierConfig(**{**defaults, **kwargs})
        super().__init__(config)
