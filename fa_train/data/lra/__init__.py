"""Long-Range Arena data: generators (ListOps, Pathfinder), loaders (Text, Retrieval, Image) and
their LightningDataModules. `register_cli(subparsers)` adds `fa-data listops` and
`fa-data pathfinder` (each sets `func(args) -> int` on its parser).

The DataModules are imported lazily so `fa-data` does not pay for torch/lightning imports."""
from __future__ import annotations

import importlib

_LAZY = {
    "ListOpsDataModule": "fa_train.data.lra.datamodule",
    "PathfinderDataModule": "fa_train.data.lra.datamodule",
    "TextDataModule": "fa_train.data.lra.datamodule",
    "RetrievalDataModule": "fa_train.data.lra.datamodule",
    "ImageDataModule": "fa_train.data.lra.datamodule",
    "SequenceClassificationDataModule": "fa_train.data.lra.base",
    "Collator": "fa_train.data.lra.base",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_cli(subparsers) -> None:
    from fa_train.data.lra import listops, pathfinder

    listops.register_cli(subparsers)
    pathfinder.register_cli(subparsers)


__all__ = [*_LAZY, "register_cli"]
