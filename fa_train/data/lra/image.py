"""LRA Image: CIFAR-10 as 1024 grayscale pixel tokens (python pickle batches)."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np

from fa_train.errors import UserError

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"
LAYOUT = "cifar-10-batches-py/{data_batch_1..5,test_batch} (the CIFAR-10 python version)"


def _find_root(path: Path) -> Path:
    for d in (path, path / "cifar-10-batches-py"):
        if all((d / f).is_file() for f in [*TRAIN_FILES, TEST_FILE]):
            return d
    raise FileNotFoundError(f"no CIFAR-10 data in {path}: expected {LAYOUT}")


def _read_batch(f: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(f, "rb") as fh:
        d = pickle.load(fh, encoding="bytes")
    data = d.get(b"data", d.get("data"))
    labels = d.get(b"labels", d.get("labels"))
    if data is None or labels is None:
        raise UserError(f"{f} is not a CIFAR-10 python batch (no 'data'/'labels' keys)")
    return np.asarray(data, np.uint8).reshape(-1, 3, 32, 32), np.asarray(labels, np.int64)


def to_grayscale(rgb: np.ndarray) -> np.ndarray:
    """(n, 3, H, W) uint8 -> (n, H, W) uint8 with ITU-R 601 luma (as tf.image.rgb_to_grayscale)."""
    w = np.asarray([0.2989, 0.5870, 0.1140], np.float32)
    g = np.tensordot(w, rgb.astype(np.float32), axes=([0], [1]))
    return np.clip(np.rint(g), 0, 255).astype(np.uint8)


def load_cifar10_gray(path: str | os.PathLike, n_val: int = 5000) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{'train', 'val', 'test'}: (uint8 (n, 32, 32), labels); val is the last `n_val` training
    images (45K / 5K / 10K for the full set)."""
    root = _find_root(Path(path))
    xs, ys = zip(*(_read_batch(root / f) for f in TRAIN_FILES))
    x, y = to_grayscale(np.concatenate(xs)), np.concatenate(ys)
    xt, yt = _read_batch(root / TEST_FILE)
    n_val = min(n_val, len(x) // 2)
    cut = len(x) - n_val
    return {"train": (x[:cut], y[:cut]), "val": (x[cut:], y[cut:]), "test": (to_grayscale(xt), yt)}
