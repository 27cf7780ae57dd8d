"""The per-layer KV cache of autoregressive inference (GPT.prefill / GPT.decode).

One preallocated key and one value tensor for all layers, (n_layer, B, capacity, H, d), and
``seqlens`` (B,) int32: how many tokens each row holds. A prefill writes a prompt's keys and
values through the training attention path; a decode step writes its new tokens at ``seqlens``
and attends through ``Attention.attend_cache``; `advance` then counts the tokens kept. Every
tensor is updated in place (fixed addresses), so a CUDA graph can replay a decode step.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    k: torch.Tensor        # (n_layer, B, capacity, H, d)
    v: torch.Tensor
    seqlens: torch.Tensor  # (B,) int32

    @classmethod
    def empty(cls, n_layer: int, batch: int, capacity: int, n_head: int, head_dim: int,
              dtype: torch.dtype, device) -> "KVCache":
        shape = (n_layer, batch, capacity, n_head, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device),
                   torch.zeros(shape, dtype=dtype, device=device),
                   torch.zeros(batch, dtype=torch.int32, device=device))

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def layer(self, i: int, prefill: bool = False, tree_parents=None) -> "LayerCache":
        return LayerCache(self.k[i], self.v[i], self.seqlens, prefill, tree_parents)

    def advance(self, n: int | torch.Tensor) -> None:
        """Count `n` more tokens as held (per row when a tensor), in place; an int adds without
        copying from the host, so the step can be captured in a CUDA graph."""
        if isinstance(n, torch.Tensor):
            n = n.to(dtype=torch.int32, device=self.seqlens.device)
        self.seqlens += n

    def keep_nodes(self, nodes: list[int]) -> None:
        """Keep the new tokens at offsets `nodes` (an accepted path through a verified tree,
        batch 1) as the next len(nodes) tokens, and count them held."""
        start = int(self.seqlens[0])
        src = torch.tensor(nodes, device=self.k.device) + start
        dst = torch.arange(start, start + len(nodes), device=self.k.device)
        self.k[:, 0, dst] = self.k[:, 0, src]
        self.v[:, 0, dst] = self.v[:, 0, src]
        self.advance(len(nodes))


@dataclass
class LayerCache:
    """One layer's view of a KVCache for one forward call."""
    k: torch.Tensor        # (B, capacity, H, d)
    v: torch.Tensor
    seqlens: torch.Tensor
    prefill: bool
    tree_parents: torch.Tensor | None

    def attend(self, attention, qkv: torch.Tensor) -> torch.Tensor:
        """Attention output (B, N, H, d) for qkv (B, N, 3, H, d), storing k and v here."""
        q, k, v = qkv.unbind(dim=2)
        if self.prefill:  # right-padded prompts: causal attention never sees the padding
            self.k[:, :k.shape[1]] = k
            self.v[:, :v.shape[1]] = v
            return attention.packed(qkv, causal=True)
        return attention.attend_cache(q, k, v, self.k, self.v, self.seqlens,
                                      tree_parents=self.tree_parents)
