"""Writing generated images: `.npy` shards or the released LRA layout, plus `generator.json`.

Layout under `out/pathfinder{R}/curv_contour_length_{L}/`:
- npy: `shards/images_{k:05d}.npy` (uint8 (n, R, R)) and `shards/labels_{k:05d}.npy`, shard k
  holding images k*shard_size onwards, each written whole (a stopped generation keeps the shards it
  finished and continues after them: `shards/plan.json` says what they belong to);
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
from fa_train.errors import PreparationPaused, UserError

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


def _chunks(params: PathfinderParams, seed: int, first: int, n: int, chunk: int,
            workers: int) -> Iterator:
    jobs = [(params, seed, s, min(s + chunk, n)) for s in range(first, n, chunk)]
    if workers <= 1:
        yield from map(_gen_chunk, jobs)
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers) as pool:
        yield from pool.imap(_gen_chunk, jobs)


class _ShardWriter:
    """Shards of `shard_size` images; `resume(plan)` keeps the whole shards of an earlier call
    with the same plan (and deletes those of any other) and returns how many images they hold."""

    def __init__(self, base: Path, shard_size: int):
        self.dir, self.size, self.k = base / "shards", shard_size, 0
        self.dir.mkdir(parents=True, exist_ok=True)
        self.imgs: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def _path(self, kind: str, k: int) -> Path:
        return self.dir / f"{kind}_{k:05d}.npy"

    def resume(self, plan: dict[str, Any]) -> int:
        plan_file = self.dir / "plan.json"
        same = plan_file.is_file() and json.loads(plan_file.read_text()) == plan
        if not same:
            for stale in [*self.dir.glob("*.npy"), *self.dir.glob("*.tmp")]:
                stale.unlink()
            plan_file.write_text(json.dumps(plan, indent=2))
        while self._path("images", self.k).is_file() and self._path("labels", self.k).is_file():
            self.k += 1
        return min(self.k * self.size, int(plan["n"]))

    def positives(self) -> int:
        return sum(int(np.load(self._path("labels", k)).sum()) for k in range(self.k))

    def add(self, imgs: np.ndarray, labels: np.ndarray, _start: int, _margins) -> None:
        self.imgs.append(imgs)
        self.labels.append(labels)
        while sum(len(x) for x in self.imgs) >= self.size:
            self._flush(self.size)

    def _flush(self, take: int) -> None:
        imgs, labels = np.concatenate(self.imgs), np.concatenate(self.labels)
        for kind, arr in (("labels", labels[:take]), ("images", imgs[:take])):
            final = self._path(kind, self.k)
            tmp = final.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                np.save(fh, arr)
            os.replace(tmp, final)
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
                        per_dir: int = 1000, progress: bool = True,
                        deadline: float | None = None) -> dict[str, Any]:
    """Generate images 0..n-1 of stream `seed` into `level_dir(out, resolution, L)` as `fmt`
    ("npy" shards or "png" in the released layout) and write `generator.json` (parameters,
    including the number of distractors). Returns that summary (counts, seconds, images/s).

    npy continues after the whole shards an earlier call with the same arguments left there.
    `deadline` (Unix time): past it, stop after the images in hand and raise PreparationPaused
    (npy only: the shards written so far stay for the next call)."""
    if fmt not in FORMATS:
        raise UserError(f"fmt {fmt!r} is not supported; use one of {list(FORMATS)}")
    if deadline is not None and fmt != "npy":
        raise UserError(f"deadline needs fmt='npy' (a stopped {fmt!r} generation cannot continue)")
    n, workers = _positive("n", n), _positive("workers", workers)
    shard_size, per_dir = _positive("shard_size", shard_size), _positive("per_dir", per_dir)
    params = pathfinder_params(resolution, difficulty, num_distractors)
    base = level_dir(out, resolution, params.contour_length)
    base.mkdir(parents=True, exist_ok=True)
    first = 0
    if fmt == "npy":
        writer = _ShardWriter(base, shard_size)
        first = writer.resume({"params": params.to_dict(), "n": n, "seed": seed,
                               "shard_size": shard_size, "generator_version": GENERATOR_VERSION})
        positives = writer.positives()
    else:
        writer, positives = _ReleaseWriter(base, params, per_dir), 0
    chunk = max(1, min(CHUNK, -(-(n - first) // workers)))
    t0 = time.perf_counter()
    prog = _progress(n, resolution, difficulty) if progress else None
    try:
        for start, imgs, labels, margins in _chunks(params, seed, first, n, chunk, workers):
            writer.add(imgs, labels, start, margins)
            positives += int(labels.sum())
            if prog is not None:
                done = start + len(labels) - first
                prog[0].update(prog[1], completed=start + len(labels),
                               rate=f"{done / (time.perf_counter() - t0):.1f} img/s")
            if deadline is not None and time.time() >= deadline and start + len(labels) < n:
                raise PreparationPaused(
                    f"Pathfinder-{resolution} generation paused at its deadline: "
                    f"{writer.k * shard_size:,} of {n:,} images kept in {writer.dir}")
        writer.close()
    finally:
        if prog is not None:
            prog[0].stop()
    seconds = time.perf_counter() - t0
    summary = {
        "dir": str(base), "format": fmt, "resolution": resolution, "difficulty": difficulty,
        "n": n, "seed": seed, "workers": workers, "positives": positives,
        "generator_version": GENERATOR_VERSION, "continued_from": first,
        "seconds": round(seconds, 3), "images_per_s": round((n - first) / max(seconds, 1e-9), 2),
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
