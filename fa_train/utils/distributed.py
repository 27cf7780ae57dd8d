"""Data-parallel helpers usable from the trainer configs (trainer/ddp.yaml, trainer/fsdp.yaml)."""
from __future__ import annotations

import importlib

GRADIENT_DTYPES = ("fp32", "bf16", "fp16")


def module_wrap_policy(classes):
    """ModuleWrapPolicy over classes given by dotted path (for trainer/fsdp.yaml)."""
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    resolved = set()
    for path in classes:
        mod, _, name = str(path).rpartition(".")
        resolved.add(getattr(importlib.import_module(mod), name))
    return ModuleWrapPolicy(resolved)


def gradient_comm_hook(dtype: str = "fp32"):
    """DDP communication hook that all-reduces gradients in `dtype` (for trainer/ddp.yaml):
    None for fp32 (exact), else torch's bf16/fp16 compression hook (half the bytes on the wire,
    gradients rounded before the average)."""
    if dtype not in GRADIENT_DTYPES:
        raise ValueError(f"trainer.strategy.ddp_comm_hook.dtype must be one of {GRADIENT_DTYPES}, "
                         f"got {dtype!r}")
    if dtype == "fp32":
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return default_hooks.bf16_compress_hook if dtype == "bf16" else default_hooks.fp16_compress_hook
