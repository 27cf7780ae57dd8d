"""Reading Pathfinder images: our `.npy` shards, or PNGs in the released LRA layout
(`imgs/{b}/sample_{i}.png` listed by `metadata/{b}.npy`, text lines or the original generator's
NumPy string arrays), with a deterministic train/val/test split."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fa_train.data.lra.pathfinder.formats import level_dir

LAYOUTS = ("`pathfinder{R}/curv_contour_length_{L}/` holding either `metadata/*.npy` + "
           "`imgs/{b}/sample_{i}.png` (the LRA release layout) or `shards/images_*.npy` + "
           "`shards/labels_*.npy` (fa-data pathfinder --format npy)")


def find_level(root: Path, resolution: int | None, contour_length: int | None) -> Path:
    """The level directory under `root` (or `root` itself)."""
    def is_level(d: Path) -> bool:
        return (d / "metadata").is_dir() or (d / "shards").is_dir()

    if is_level(root):
        return root
    cl = contour_length if contour_length is not None else 14
    cands = [root / f"curv_contour_length_{cl}"]
    if resolution is not None:
        cands += [level_dir(root, resolution, cl),
                  root / f"lra_release/pathfinder{resolution}/curv_contour_length_{cl}"]
    else:
        cands += sorted(root.glob(f"pathfinder*/curv_contour_length_{cl}"))
    for c in cands:
        if is_level(c):
            return c
    raise FileNotFoundError(f"no Pathfinder data under {root}: expected {LAYOUTS}")


def metadata_rows(path: Path) -> list[list[str]]:
    """Fields of each image listed in one metadata file (text lines or a NumPy string array)."""
    with open(path, "rb") as fh:
        binary = fh.read(6) == b"\x93NUMPY"
    if binary:
        return [[str(x) for x in row] for row in np.load(path, allow_pickle=False)]
    return [line.split() for line in path.read_text().splitlines()]


class PathfinderImages:
    """Random access to Pathfinder images and labels from a level directory (either format).

    `root` may be the level directory itself or a folder holding `pathfinder{R}/...`."""

    def __init__(self, root: str | os.PathLike, resolution: int | None = None,
                 contour_length: int | None = None):
        self.dir = find_level(Path(root), resolution, contour_length)
        self._shards: list[np.ndarray] | None = None
        self._paths: list[Path] | None = None
        imgs = sorted((self.dir / "shards").glob("images_*.npy"))
        if imgs:
            self._shards = [np.load(f, mmap_mode="r") for f in imgs]
            self.labels = np.concatenate(
                [np.load(f.with_name(f.name.replace("images_", "labels_"))) for f in imgs]
            ).astype(np.int64)
            self._offsets = np.cumsum([0] + [len(s) for s in self._shards])
            self.resolution = int(self._shards[0].shape[-1])
            return
        rows = []
        for mf in (self.dir / "metadata").glob("*.npy"):
            for parts in metadata_rows(mf):
                if len(parts) < 4:
                    continue
                sub, fname, label = parts[0], parts[1], int(float(parts[3]))
                try:
                    key = (int(Path(sub).name), int(Path(fname).stem.split("_")[-1]))
                except ValueError:
                    key = (0, len(rows))
                rows.append((key, self.dir / sub / fname, label))
        if not rows:
            raise FileNotFoundError(f"{self.dir / 'metadata'} holds no metadata lines "
                                    "('imgs/{b} sample_{i}.png {i} {label} ...')")
        rows.sort(key=lambda r: r[0])
        self._paths = [r[1] for r in rows]
        self.labels = np.asarray([r[2] for r in rows], np.int64)
        self.resolution = int(self._read_png(0).shape[-1])

    def __len__(self) -> int:
        return len(self.labels)

    def _read_png(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self._paths[i]) as im:
            return np.asarray(im.convert("L"), np.uint8)

    def __getitem__(self, i: int) -> np.ndarray:
        if self._shards is not None:
            k = int(np.searchsorted(self._offsets, i, side="right")) - 1
            return np.asarray(self._shards[k][i - self._offsets[k]])
        return self._read_png(i)


def split_indices(n: int, seed: int = 0, fractions=(0.8, 0.1, 0.1),
                  counts: tuple[int, int, int] | None = None) -> dict[str, np.ndarray]:
    """Deterministic split of range(n): a seeded permutation cut in order, 80/10/10 by default
    or into explicit `counts` (train, val, test)."""
    perm = np.random.default_rng(seed).permutation(n)
    if counts is not None:
        a, b = counts[0], counts[0] + counts[1]
    else:
        a = int(round(n * fractions[0]))
        b = a + int(round(n * fractions[1]))
    return {"train": np.sort(perm[:a]), "val": np.sort(perm[a:b]), "test": np.sort(perm[b:])}


def load_pathfinder(root: str | os.PathLike, resolution: int | None = None,
                    contour_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All images (uint8 (N, R, R)) and labels (int64 (N,)) of a level directory."""
    src = PathfinderImages(root, resolution, contour_length)
    imgs = np.stack([src[i] for i in range(len(src))]) if len(src) else np.zeros((0, 0, 0), np.uint8)
    return imgs, src.labels
