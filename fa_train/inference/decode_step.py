"""One decode step of generation: the last tokens (B,) in, the next logits (B, V) out, the KV
cache advanced by one token.

`EagerStep` calls GPT.decode each time. `GraphStep` captures that call and ``cache.advance(1)``
in one CUDA graph on its first call and replays it after: the tokens go through a static (B, 1)
input buffer, the cache's tensors are updated in place at fixed addresses, and the logits come
back in a static buffer that the next step overwrites. A GPT-2 small step is about a millisecond
of GPU work but several of Python and kernel launches; the replay launches it all at once.

Neither step checks positions (a device sync): `generation.check_request` has bounded the whole
request by the context and the cache's capacity before the first step. Inside the graph the
attention runs over the cache's whole capacity (masked as usual), so one capture serves every
step; the warm-up before the capture runs the step eagerly at that same length, so every kernel
the capture records is compiled already.
"""
from __future__ import annotations

import torch

from fa_train.errors import UserError
from fa_train.models.kv_cache import KVCache

WARMUP_STEPS = 2  # eager runs before the capture: kernel compilation, cuBLAS workspaces


def use_cuda_graph(cuda_graph: bool | None, device: torch.device) -> bool:
    """The `cuda_graph` option resolved for a model on `device` (None: on for CUDA models)."""
    if cuda_graph is None:
        return device.type == "cuda"
    if not isinstance(cuda_graph, bool):
        raise UserError(f"cuda_graph={cuda_graph!r} is invalid: expected True, False or None "
                        "(None: on for CUDA models)")
    if cuda_graph and device.type != "cuda":
        raise UserError(f"cuda_graph=True is invalid: CUDA graphs need a model on a CUDA device, "
                        f"this one is on {device}")
    return cuda_graph


class EagerStep:
    """GPT.decode of one token per row, then cache.advance(1)."""

    def __init__(self, model, cache: KVCache):
        self.model, self.cache = model, cache

    def step(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, V) after the tokens idx (B, 1); the cache then holds them."""
        logits = self.model.decode(idx, self.cache, check_positions=False)[:, 0]
        self.cache.advance(1)
        return logits

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.step(tokens[:, None])


class GraphStep(EagerStep):
    """The eager step captured in a CUDA graph on the first call and replayed afterwards. The
    returned logits are a static buffer: read them before the next call."""

    def __init__(self, model, cache: KVCache):
        super().__init__(model, cache)
        self.tokens = torch.zeros(cache.seqlens.shape[0], 1, dtype=torch.long,
                                  device=cache.seqlens.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens[:, None])
        if self.graph is None:
            with torch.cuda.device(self.tokens.device):
                self.capture()
        self.graph.replay()
        return self.logits

    def decode_at_capacity(self) -> None:
        """Run the step's decode eagerly with every row's cache full to its capacity, as the
        capture sees it, then restore the counts (the keys and values it wrote lie beyond them,
        where the steps to come write their own before reading)."""
        held = self.cache.seqlens.clone()
        self.cache.seqlens.fill_(self.cache.capacity - 1)
        for _ in range(WARMUP_STEPS):
            self.model.decode(self.tokens, self.cache, check_positions=False)
        self.cache.seqlens.copy_(held)

    def capture(self) -> None:
        """Warm up on a side stream (as torch.cuda.graphs asks), then capture the step."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.decode_at_capacity()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self.step(self.tokens)
        self.graph = graph


def decode_step(model, cache: KVCache, cuda_graph: bool) -> EagerStep:
    """The step generation runs per token: replayed from a CUDA graph, or eager."""
    return GraphStep(model, cache) if cuda_graph else EagerStep(model, cache)
