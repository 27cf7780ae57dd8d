"""Speculative greedy decoding: a small draft model proposes a token tree, the target model
verifies the whole tree in one pass (tree attention over its KV cache) and keeps the longest path
that matches its own greedy choices, plus one token of its own.

The tree grows level by level: ``widths[l]`` children (the draft's most likely tokens) under every
node of level l, so ``(1, 1, 1, 1)`` is a chain of four and ``(2, 2, 1)`` a tree of 1 + 2 + 4 + 4
nodes. The output equals the target's greedy output (every kept token is the target's argmax after
the tokens before it); only the number of target passes changes. Batch 1. Both models run
eagerly (no CUDA graph: the tree's shape changes from pass to pass).
"""
from __future__ import annotations

import math
import time

import torch

from fa_train.errors import UserError, check_int
from fa_train.inference.generation import (Generation, Outputs, StopFn, Timing, TokenFn,
                                           check_request, prefill, synchronize)


def check_widths(widths) -> tuple[int, ...]:
    widths = tuple(widths)
    if not widths:
        raise UserError("spec_tree is invalid: expected at least one level width")
    for w in widths:
        check_int("spec_tree width", w)
    return widths


class TokenTree:
    """Tokens with parent links, parents before children; node 0 is the root."""

    def __init__(self, root: int):
        self.tokens, self.parents = [root], [-1]

    def add(self, parent: int, token: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        return len(self.tokens) - 1

    def tensors(self, device):
        return (torch.tensor([self.tokens], device=device),
                torch.tensor(self.parents, dtype=torch.int32, device=device))

    def greedy_path(self, choice: list[int]) -> list[int]:
        """Nodes from the root along children whose token is `choice` of their parent."""
        path = [0]
        while True:
            node = path[-1]
            match = [c for c, p in enumerate(self.parents) if p == node
                     and self.tokens[c] == choice[node]]
            if not match:
                return path
            path.append(match[0])


def draft_tree(draft, cache, root: int, widths: tuple[int, ...]) -> TokenTree:
    """The draft's tree under `root` (the cache holds what comes before it; not advanced)."""
    tree, level = TokenTree(root), [0]
    device = cache.seqlens.device
    for width in widths:
        idx, parents = tree.tensors(device)
        logits = draft.decode(idx, cache, parents)[0]
        level = [tree.add(node, t) for node in level
                 for t in logits[node].topk(width).indices.tolist()]
    return tree


@torch.no_grad()
def speculative_generate(target, draft, prompt: list[int], max_new_tokens: int,
                         widths=(1, 1, 1, 1), eos_id: int | None = None,
                         stop: StopFn | None = None, on_token: TokenFn | None = None) -> Generation:
    """The target's greedy continuation of `prompt`, drafted by `draft` (same vocabulary);
    ``stats``: target passes, draft tokens accepted per pass and the acceptance rate."""
    widths = check_widths(widths)
    if draft.config.vocab_size != target.config.vocab_size:
        raise UserError(f"draft is invalid: its vocabulary ({draft.config.vocab_size} tokens) "
                        f"differs from the target's ({target.config.vocab_size})")
    capacity = check_request(target, [prompt], max_new_tokens)
    check_request(draft, [prompt], max_new_tokens)
    device = target.wte.weight.device
    outputs = Outputs(1, max_new_tokens, eos_id, stop, on_token)
    timing = Timing(prefill_tokens=len(prompt))
    start = time.perf_counter()
    tree_size = 1 + sum(math.prod(widths[:i + 1]) for i in range(len(widths)))
    tcache, logits = prefill(target, [prompt], capacity + tree_size)
    dcache, _ = prefill(draft, [prompt], capacity + tree_size)
    synchronize(device)
    timing.prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    last = int(logits[0].argmax())
    outputs.add(0, last)
    passes = accepted = drafted = 0
    while not outputs.finished:
        depth = min(len(widths), max_new_tokens - len(outputs.tokens[0]) - 1)
        tree = draft_tree(draft, dcache, last, widths[:depth])
        idx, parents = tree.tensors(device)
        choice = target.decode(idx, tcache, parents)[0].argmax(dim=-1).tolist()
        path = tree.greedy_path(choice)
        passes, accepted, drafted = passes + 1, accepted + len(path) - 1, drafted + depth
        tcache.keep_nodes(path)
        kept = [tree.tokens[n] for n in path]
        draft.decode(torch.tensor([kept], device=device), dcache)
        dcache.advance(len(kept))
        last = choice[path[-1]]
        for token in kept[1:] + [last]:
            outputs.add(0, token)
    synchronize(device)
    timing.decode_s = time.perf_counter() - start
    timing.decode_tokens = len(outputs.tokens[0])
    stats = {"target_passes": passes, "accepted_per_pass": accepted / max(passes, 1),
             "acceptance_rate": accepted / max(drafted, 1), "tree_widths": list(widths)}
    return Generation(outputs.tokens, timing, stats)
