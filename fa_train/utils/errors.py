"""Classifying failures."""
from __future__ import annotations


def is_oom(exc: BaseException) -> bool:
    """True for CUDA out-of-memory errors, host MemoryError and errors whose message says
    "out of memory" (allocators of other backends)."""
    import torch
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
