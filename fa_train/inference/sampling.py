"""Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fa_train.errors import check_float, check_int


@dataclass(frozen=True)
class Sampling:
    """temperature 0: greedy (argmax); otherwise softmax(logits / temperature) restricted to the
    `top_k` most likely tokens and to the smallest set whose probability reaches `top_p`."""
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        check_float("temperature", self.temperature, 0.0)
        if self.top_k is not None:
            check_int("top_k", self.top_k)
        if self.top_p is not None:
            check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def next_tokens(self, logits: torch.Tensor, generator: torch.Generator | None = None):
        """(B,) token ids for logits (B, V)."""
        if self.greedy:
            return logits.argmax(dim=-1)
        scores = logits.float() / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = scores.topk(self.top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, -torch.inf)
        if self.top_p is not None:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            before = sorted_scores.softmax(dim=-1).cumsum(dim=-1) - sorted_scores.softmax(dim=-1)
            drop = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, order,
                                                                       before >= self.top_p)
            scores = scores.masked_fill(drop, -torch.inf)
        probs = scores.softmax(dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)
