"""Writing generated images: `.npy` shards or the released LRA layout, plus `generator.json`.

Layout under `out/pathfinder{R}/curv_contour_length_{L}/`:
- npy: `shards/images_{k:05d}.npy` (uint8 (n, R, R)) and `shards/labels_{k:05d}.npy`;
- png: `imgs/{b}/sample_{i}.png` (`per_dir` images per folder) and text metadata
  `metadata/{b}.npy`, one line per image: `imgs/{b} sample_{i}.png {i} {label} {continuity}
  {contour_length} {distractor_length} {paddle_length} {paddle_thickness} {margin} 1`
  (the original generator's fields).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from fa_train.data.lra.pathfinder.generator import GENERATOR_VERSION, compose, draw_sample, render_layers
from fa_train.data.lra.pathfinder.params import PathfinderParams, pathfinder_params
from fa_train.errors import UserError

FORMATS = ("npy", "png")
CHUNK = 256  # images per job


def level_dir(root: str | os.PathLike, resolution: int, contour_length: int) -> Path:
    return Path(root) / f"pathfinder{resolution}" / f"curv_contour_length_{contour_length}"


def _positive(name: str, value: int) -> int:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def _gen_chunk(job) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    params, seed, start, stop = job
    samples = [draw_sample(params, np.random.default_rng([int(seed), i])) for i in range(start, stop)]
    imgs = [compose(render_layers(params, s)) for s in samples]
    labels, margins = [s.label for s in samples], [s.margin for s in samples]
    return start, np.stack(imgs), np.asarray(labels, np.uint8), np.asarray(margins, np.uint8)


def _chunks(params: PathfinderParams, seed: int, n: int, chunk: int, workers: int) -> Iterator:
    jobs = [(params, seed, s, min(s + chunk, n)) for s in range(0, n, chunk)]
    if workers <= 1:
        yield from map(_gen_chunk, jobs)
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers) as pool:
        yield from pool.imap(_gen_chunk, jobs)


class _ShardWriter:
    def __init__(self, base: Path, shard_size: int):
        self.dir, self.size, self.k = base / "shards", shard_size, 0
        self.dir.mkdir(parents=True, exist_ok=True)
        self.imgs: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def add(self, imgs: np.ndarray, labels: np.ndarray, _start: int, _margins) -> None:
        self.imgs.append(imgs)
        self.labels.append(labels)
        while sum(len(x) for x in self.imgs) >= self.size:
            self._flush(self.size)

    def _flush(self, take: int) -> None:
        imgs, labels = np.concatenate(self.imgs), np.concatenate(self.labels)
        np.save(self.dir / f"images_{self.k:05d}.npy", imgs[:take])
        np.save(self.dir / f"labels_{self.k:05d}.npy", labels[:take])
        self.imgs, self.labels = [imgs[take:]], [labels[take:]]
        self.k += 1

    def close(self) -> None:
        rest = sum(len(x) for x in self.imgs)
        if rest:
            self._flush(rest)


class _ReleaseWriter:
    def __init__(self, base: Path, params: PathfinderParams, per_dir: int):
        self.base, self.p, self.per_dir = base, params, per_dir
        self.lines: dict[int, dict[int, str]] = {}

    def add(self, imgs: np.ndarray, labels: np.ndarray, start: int, margins: np.ndarray) -> None:
        from PIL import Image

        p = self.p
        for k, (img, label, margin) in enumerate(zip(imgs, labels, margins)):
            b, j = divmod(start + k, self.per_dir)
            d = self.base / "imgs" / str(b)
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(d / f"sample_{j}.png")
            self.lines.setdefault(b, {})[j] = (
                f"imgs/{b} sample_{j}.png {j} {int(label)} {p.continuity} {p.contour_length} "
                f"{p.distractor_length} {p.paddle_length} {p.paddle_thickness} {int(margin)} 1\n")

    def close(self) -> None:
        meta = self.base / "metadata"
        meta.mkdir(parents=True, exist_ok=True)
        for b, rows in self.lines.items():
            (meta / f"{b}.npy").write_text("".join(rows[j] for j in sorted(rows)))


def generate_pathfinder(out: str | os.PathLike, resolution: int = 32, difficulty: str = "hard",
                        n: int = 1000, seed: int = 0, workers: int = 1, fmt: str = "npy",
                        num_distractors: int | None = None, shard_size: int = 1000,
                        per_dir: int = 1000, progress: bool = True) -> dict[str, Any]:
    """Generate images 0..n-1 of stream `seed` into `level_dir(out, resolution, L)` as `fmt`
    ("npy" shards or "png" in the released layout) and write `generator.json` (parameters,
    including the number of distractors). Returns that summary (counts, seconds, images/s)."""
    if fmt not in FORMATS:
        raise UserError(f"fmt {fmt!r} is not supported; use one of {list(FORMATS)}")
    n, workers = _positive("n", n), _positive("workers", workers)
    shard_size, per_dir = _positive("shard_size", shard_size), _positive("per_dir", per_dir)
    params = pathfinder_params(resolution, difficulty, num_distractors)
    base = level_dir(out, resolution, params.contour_length)
    base.mkdir(parents=True, exist_ok=True)
    writer = _ShardWriter(base, shard_size) if fmt == "npy" else _ReleaseWriter(base, params, per_dir)
    chunk = max(1, min(CHUNK, -(-n // workers)))
    positives, t0 = 0, time.perf_counter()
    prog = _progress(n, resolution, difficulty) if progress else None
    try:
        for start, imgs, labels, margins in _chunks(params, seed, n, chunk, workers):
            writer.add(imgs, labels, start, margins)
            positives += int(labels.sum())
            if prog is not None:
                prog[0].update(prog[1], advance=len(labels),
                               rate=f"{(start + len(labels)) / (time.perf_counter() - t0):.1f} img/s")
        writer.close()
    finally:
        if prog is not None:
            prog[0].stop()
    seconds = time.perf_counter() - t0
    summary = {
        "dir": str(base), "format": fmt, "resolution": resolution, "difficulty": difficulty,
        "n": n, "seed": seed, "workers": workers, "positives": positives,
        "generator_version": GENERATOR_VERSION,
        "seconds": round(seconds, 3), "images_per_s": round(n / max(seconds, 1e-9), 2),
        "params": params.to_dict(),
    }
    (base / "generator.json").write_text(json.dumps(summary, indent=2))
    return summary


def _progress(n: int, resolution: int, difficulty: str):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    prog = Progress(TextColumn(f"[bold]pathfinder{resolution} {difficulty}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                    TimeRemainingColumn())
    prog.start()
    return prog, prog.add_task("gen", total=n, rate="")
