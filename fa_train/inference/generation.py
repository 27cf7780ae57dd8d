"""Autoregressive generation with a KV cache: one prefill over the (right-padded) prompts, then one
decode step per new token, batched over prompts of different lengths.

A row stops at ``max_new_tokens``, at the end-of-text token (not kept) or when ``stop(tokens)``
says so (the CLI's stop strings); ``on_token(row, tokens)`` sees every new token (streaming).
Timings count prefill and decode separately (CUDA synchronized). On CUDA the decode steps replay
one CUDA graph (fa_train.inference.decode_step; ``cuda_graph=False``: eager); its capture counts
as decode time. Sampling runs outside the graph on its logits: the host reads every step's
tokens anyway (end of text, stop strings, streaming), and sampling draws from the same seeded CPU
generator with and without the graph.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from fa_train.errors import UserError, check_int
from fa_train.inference.decode_step import decode_step, use_cuda_graph
from fa_train.inference.sampling import Sampling

StopFn = Callable[[list[int]], bool]
TokenFn = Callable[[int, list[int]], None]


@dataclass
class Timing:
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0

    @staticmethod
    def rate(tokens: int, seconds: float) -> float:
        return tokens / seconds if seconds > 0 else float("nan")

    def summary(self) -> str:
        return (f"prefill: {self.prefill_tokens} tokens in {self.prefill_s:.3f} s "
                f"({self.rate(self.prefill_tokens, self.prefill_s):,.1f} tokens/s); "
                f"decode: {self.decode_tokens} tokens in {self.decode_s:.3f} s "
                f"({self.rate(self.decode_tokens, self.decode_s):,.1f} tokens/s)")


@dataclass
class Generation:
    tokens: list[list[int]]                     # the new tokens of each prompt
    timing: Timing
    stats: dict = field(default_factory=dict)   # speculative decoding: acceptance


class Outputs:
    """The new tokens of each row and when each row is finished."""

    def __init__(self, rows: int, max_new_tokens: int, eos_id: int | None = None,
                 stop: StopFn | None = None, on_token: TokenFn | None = None):
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.done = [False] * rows
        self.max_new_tokens, self.eos_id, self.stop, self.on_token = \
            max_new_tokens, eos_id, stop, on_token

    @property
    def finished(self) -> bool:
        return all(self.done)

    def add(self, row: int, token: int) -> None:
        if self.done[row]:
            return
        if token == self.eos_id:
            self.done[row] = True
            return
        out = self.tokens[row]
        out.append(token)
        if self.on_token is not None:
            self.on_token(row, out)
        if len(out) >= self.max_new_tokens or (self.stop is not None and self.stop(out)):
            self.done[row] = True


def check_request(model, prompts: list[list[int]], max_new_tokens: int) -> int:
    """The cache capacity a request needs; one line naming the argument that does not fit."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UserError("prompt is invalid: every prompt needs at least one token")
    check_int("max_new_tokens", max_new_tokens)
    context = model.config.max_seq_len
    longest = max(len(p) for p in prompts)
    if longest > context:
        raise UserError(f"prompt is invalid: {longest} tokens is longer than the model's context "
                        f"(model.max_seq_len={context})")
    if longest + max_new_tokens > context:
        raise UserError(f"max_new_tokens={max_new_tokens} is invalid: expected at most "
                        f"{context - longest} (a {longest}-token prompt in a context of {context})")
    return longest + max_new_tokens


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill(model, prompts: list[list[int]], capacity: int):
    """(KV cache, last-token logits (B, V)) for `prompts` right-padded into one batch."""
    device = model.wte.weight.device
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int32, device=device)
    idx = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long)
    for row, p in enumerate(prompts):
        idx[row, :len(p)] = torch.tensor(p)
    cache = model.new_cache(len(prompts), capacity)
    return cache, model.prefill(idx.to(device), lengths, cache)


@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new_tokens: int,
             sampling: Sampling = Sampling(), seed: int = 0, eos_id: int | None = None,
             stop: StopFn | None = None, on_token: TokenFn | None = None,
             cuda_graph: bool | None = None) -> Generation:
    """New tokens for each prompt (see the module docstring); `seed` fixes the sampling;
    `cuda_graph`: replay the decode step from a CUDA graph (None: on for a CUDA model)."""
    capacity = check_request(model, prompts, max_new_tokens)
    device = model.wte.weight.device
    cuda_graph = use_cuda_graph(cuda_graph, device)
    generator = torch.Generator().manual_seed(seed)
    outputs = Outputs(len(prompts), max_new_tokens, eos_id, stop, on_token)
    timing = Timing(prefill_tokens=sum(len(p) for p in prompts))
    start = time.perf_counter()
    cache, logits = prefill(model, prompts, capacity)
    synchronize(device)
    timing.prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    step = decode_step(model, cache, cuda_graph)
    while True:
        tokens = sampling.next_tokens(logits, generator)
        for row, token in enumerate(tokens.tolist()):
            outputs.add(row, token)
        if outputs.finished:
            break
        logits = step(tokens)
    synchronize(device)
    timing.decode_s = time.perf_counter() - start
    timing.decode_tokens = sum(len(t) for t in outputs.tokens)
    return Generation(outputs.tokens, timing)
