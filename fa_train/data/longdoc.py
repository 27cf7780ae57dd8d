"""Long-document multi-label classification (MIMIC-III ICD coding, ECtHR): JSONL loader and
LightningDataModule.

Layout: `data_dir/{train,validation,test}.jsonl` (`val.jsonl`/`dev.jsonl` also accepted for
validation), one JSON object per line with "text" (a string, or a list of paragraphs that are
joined with newlines) and "labels" (a list of label names or ids; "label" is accepted too).
Labels become multi-hot float vectors over `label_names` (default: all labels seen, sorted).
Tokens: bytes (pad 0, byte b -> b + 1, vocab 257) or a `tokenizers` BPE tokenizer JSON file;
sequences are truncated to `max_length` (up to 16384)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from torch.utils.data import Dataset

from fa_train.data.lra.base import MapDataset, SequenceClassificationDataModule, take
from fa_train.data.lra.text import BYTE_VOCAB_SIZE, encode_bytes
from fa_train.errors import UserError

SPLIT_NAMES = {"train": ("train",), "val": ("validation", "val", "dev"), "test": ("test",)}
LAYOUT = ("{train,validation,test}.jsonl, one object per line with 'text' (string or list of "
          "paragraphs) and 'labels' (list)")
MAX_SUPPORTED_LENGTH = 16384


def find_split_files(data_dir: str | os.PathLike) -> dict[str, Path]:
    root = Path(data_dir)
    out = {}
    for split, names in SPLIT_NAMES.items():
        for name in names:
            f = root / f"{name}.jsonl"
            if f.is_file():
                out[split] = f
                break
        else:
            raise FileNotFoundError(f"no {split} split in {root}: expected {LAYOUT}")
    return out


def read_jsonl(path: str | os.PathLike) -> tuple[list[str], list[list[Any]]]:
    """(texts, label lists) of one JSONL file."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{k}: not valid JSON ({e.msg}); expected {LAYOUT}") from None
            if "text" not in obj:
                raise UserError(f"{path}:{k}: no 'text' field; expected {LAYOUT}")
            text = obj["text"]
            texts.append("\n".join(map(str, text)) if isinstance(text, list) else str(text))
            lab = obj.get("labels", obj.get("label"))
            if lab is None:
                raise UserError(f"{path}:{k}: no 'labels' field; expected {LAYOUT}")
            labels.append(list(lab) if isinstance(lab, (list, tuple)) else [lab])
    return texts, labels


def multi_hot(label_lists: Sequence[Sequence[Any]], label_names: Sequence[Any]) -> np.ndarray:
    index = {name: i for i, name in enumerate(label_names)}
    out = np.zeros((len(label_lists), len(label_names)), np.float32)
    for r, labs in enumerate(label_lists):
        for lab in labs:
            if lab in index:
                out[r, index[lab]] = 1.0
    return out


class ByteEncoder:
    def __init__(self, max_length: int):
        self.max_length = max_length

    def __call__(self, text: str) -> np.ndarray:
        return encode_bytes(text, self.max_length)


class BPEEncoder:
    """A `tokenizers` JSON file; loaded lazily so the object pickles cheaply to workers."""

    def __init__(self, path: str, max_length: int):
        self.path, self.max_length = str(path), max_length
        self._tok = None

    @property
    def tok(self):
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(self.path)
        return self._tok

    def __getstate__(self):
        return {"path": self.path, "max_length": self.max_length, "_tok": None}

    def __call__(self, text: str) -> np.ndarray:
        ids = self.tok.encode(text).ids[: self.max_length]
        return np.asarray(ids, np.int64)

    def pad_id(self) -> int:
        for t in ("<pad>", "[PAD]", "<|padding|>", "<|endoftext|>"):
            i = self.tok.token_to_id(t)
            if i is not None:
                return int(i)
        return 0


class LongDocDataModule(SequenceClassificationDataModule):
    """Multi-label long documents: labels float32 multi-hot (B, num_classes), `multi_label=True`.

    tokenizer: "byte" or the path of a `tokenizers` JSON file (BPE)."""

    multi_label = True

    def __init__(self, data_dir: str, max_length: int = 4096, tokenizer: str = "byte",
                 label_names: Sequence[Any] | None = None, n_train: int | None = None,
                 n_val: int | None = None, n_test: int | None = None, batch_size: int = 8,
                 num_workers: int = 0, seed: int = 0, **kw):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, **kw)
        if not 0 < int(max_length) <= MAX_SUPPORTED_LENGTH:
            raise UserError(f"max_length {max_length} is not supported; use 1..{MAX_SUPPORTED_LENGTH}")
        self.data_dir, self.max_length, self.tokenizer = data_dir, int(max_length), tokenizer
        self.label_names = list(label_names) if label_names is not None else None
        self.n = (n_train, n_val, n_test)

    def build(self) -> dict[str, Dataset]:
        if self.data_dir is None:
            raise FileNotFoundError(f"data_dir is required for long-document data; expected {LAYOUT}")
        files = find_split_files(self.data_dir)
        data = {k: read_jsonl(f) for k, f in files.items()}
        if self.label_names is None:
            seen = {lab for _, labs in data.values() for ls in labs for lab in ls}
            self.label_names = sorted(seen, key=lambda x: (isinstance(x, str), x))
        if self.tokenizer == "byte":
            enc: Any = ByteEncoder(self.max_length)
            self.vocab_size, self.pad_id = BYTE_VOCAB_SIZE, 0
        else:
            if not Path(self.tokenizer).is_file():
                raise FileNotFoundError(f"tokenizer {self.tokenizer!r} is neither 'byte' nor a "
                                        "tokenizers JSON file")
            enc = BPEEncoder(self.tokenizer, self.max_length)
            self.vocab_size, self.pad_id = enc.tok.get_vocab_size(), enc.pad_id()
        self.seq_len, self.num_classes = self.max_length, len(self.label_names)
        out = {}
        for (split, (texts, labs)), n in zip(data.items(), self.n):
            k = take(n, len(texts))
            out[split] = MapDataset(texts[:k], multi_hot(labs[:k], self.label_names), enc)
        return out
