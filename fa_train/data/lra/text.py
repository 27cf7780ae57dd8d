"""LRA Text: IMDb reviews, byte-level tokens (from the `aclImdb/` directory layout)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

PAD_ID = 0
BYTE_VOCAB_SIZE = 257  # pad 0, byte b -> b + 1
LAYOUT = "aclImdb/{train,test}/{pos,neg}/*.txt"


def encode_bytes(text: str | bytes, max_length: int | None = None) -> np.ndarray:
    """Byte-level ids: byte b -> b + 1 (0 is padding); truncated to `max_length`."""
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if max_length is not None:
        raw = raw[:max_length]
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int16) + 1


def _find_root(path: Path) -> Path:
    for d in (path, path / "aclImdb"):
        if all((d / s / c).is_dir() for s in ("train", "test") for c in ("pos", "neg")):
            return d
    raise FileNotFoundError(f"no IMDb data in {path}: expected the aclImdb layout {LAYOUT} "
                            "(train/pos, train/neg, test/pos, test/neg holding one review per .txt)")


def load_imdb(path: str | os.PathLike) -> dict[str, tuple[list[str], np.ndarray]]:
    """{'train': (texts, labels), 'test': (texts, labels)}; label 1 = pos, 0 = neg.
    Files are read in sorted order (neg first, then pos) so the result is deterministic."""
    root = _find_root(Path(path))
    out = {}
    for split in ("train", "test"):
        texts, labels = [], []
        for label, cls in ((0, "neg"), (1, "pos")):
            files = sorted((root / split / cls).glob("*.txt"))
            for f in files:
                texts.append(f.read_text(encoding="utf-8", errors="replace"))
                labels.append(label)
        if not texts:
            raise FileNotFoundError(f"{root / split} holds no reviews; expected {LAYOUT}")
        out[split] = (texts, np.asarray(labels, np.int64))
    return out
