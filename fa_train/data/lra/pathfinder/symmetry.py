"""Training images under the eight symmetries of the square (rotations by multiples of 90
degrees, each with or without a reflection). Whether the two markers are joined by a path does
not change under any of them, and the generator treats every direction and every side of the
image alike, so each transformed image is another draw of the same task with the same label."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from torch.utils.data import Dataset

SYMMETRIES = 8
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant of the golden ratio: spreads consecutive ids
_MASK = (1 << 64) - 1


def symmetry_of(seed: int, sample_id: int) -> int:
    """Which of the 8 symmetries sample `sample_id` gets: a pure function of (seed, id)."""
    h = ((sample_id + 1) * _MIX + seed * 0xBF58476D1CE4E5B9) & _MASK
    h ^= h >> 31
    h = (h * 0x94D049BB133111EB) & _MASK
    return (h >> 29) % SYMMETRIES


def apply_symmetry(image: np.ndarray, k: int) -> np.ndarray:
    """Symmetry k of a square image: k & 4 transposes, then k & 3 quarter turns (k = 0: itself)."""
    if not 0 <= k < SYMMETRIES:
        raise ValueError(f"symmetry must be in 0..{SYMMETRIES - 1}, got {k}")
    return np.rot90(image.T if k & 4 else image, k & 3)


class SymmetricImages(Dataset):
    """`source[index[id % n]]` under symmetry `symmetry_of(seed, id)`, flattened, with its label.

    Takes the loader's global sample ids (`EpochSampler(global_ids=True)`: unique across epochs),
    so one image meets a fresh symmetry in each epoch and a resumed run sees the same ones."""

    global_ids = True

    def __init__(self, source, labels: np.ndarray, index: Sequence[int], seed: int):
        self.source, self.labels, self.seed = source, labels, int(seed)
        self.index = np.asarray(index)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, sample_id: int):
        j = int(self.index[sample_id % len(self.index)])
        image = apply_symmetry(np.asarray(self.source[j]), symmetry_of(self.seed, sample_id))
        return np.ascontiguousarray(image).reshape(-1), self.labels[j]
