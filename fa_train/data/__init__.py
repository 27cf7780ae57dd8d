"""Data: LightningDataModules and generators.

- `fa_train.data.lm.LMDataModule`: causal-LM windows from any text source (cached token memmaps).
- `fa_train.data.mlm.MLMDataModule`: BERT sentence pairs with dynamic masking.
- `fa_train.data.corpus`: the offline default corpus (Python docs) and the GPT-2 BPE files.
- `fa_train.data.tokenizer.build_tokenizer`: BPE / GPT-2 / WordPiece / saved JSON.
- `fa_train.data.lra`: Long-Range Arena data. `fa-data` (`fa_train.data.cli`) prepares all of them.

Exports are lazy so that importing a submodule does not import lightning/datasets.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "LMDataModule": "fa_train.data.lm",
    "MLMDataModule": "fa_train.data.mlm",
    "build_tokenizer": "fa_train.data.tokenizer",
    "prepare_python_docs": "fa_train.data.corpus",
    "fetch_gpt2_bpe": "fa_train.data.corpus",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
