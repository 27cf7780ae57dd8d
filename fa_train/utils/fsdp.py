"""FSDP helpers usable from configs."""
from __future__ import annotations

import importlib


def module_wrap_policy(classes):
    """ModuleWrapPolicy over classes given by dotted path (for trainer/fsdp.yaml)."""
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    resolved = set()
    for path in classes:
        mod, _, name = str(path).rpartition(".")
        resolved.add(getattr(importlib.import_module(mod), name))
    return ModuleWrapPolicy(resolved)
