"""Pathfinder / Path-X / Path-256: a fast, seeded generator, its on-disk formats and a loader.

The task (Linsley et al. 2018, used by LRA): a grayscale image holds two target "snakes" made of
short dashes ("paddles") plus distractor snakes; two circle markers are drawn; label 1 iff both
markers lie on the same snake. Parameters follow the LRA data specification (one
`PathfinderParams` per resolution, `pathfinder_params` picks the difficulty).

Why it is fast (a straightforward port spends seconds per image restarting whole snakes):
- occupancy is a uint8 count grid; a paddle is stamped by one vectorized distance-to-segment
  test over its bounding box only (+1 to add, -1 to take it back);
- the candidate heads of the next paddle (the arc of the circle of radius L+m, one-pixel spacing,
  turn limited by the continuity) are scored at once: for every candidate the points along its
  paddle are looked up in the grid and the turn weight cos(min(dθ·continuity, π/2))² applied;
- a snake that runs into a dead end drops its last paddle and resamples it (bounded backtracking)
  instead of restarting the pair; the pair is regenerated only when that budget is spent;
- rendering draws each paddle at 2x resolution (anti-aliased coverage from the distance to the
  segment, bounding box only), combines by pixel-wise max and Lanczos-downsamples once with PIL.

Every image is a pure function of (params, seed, index): `numpy.random.default_rng([seed, index])`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from fa_train.errors import UserError

DIFFICULTIES = {"easy": 6, "intermediate": 9, "hard": 14}
RESOLUTIONS = (32, 64, 128, 256)


@dataclass(frozen=True)
class PathfinderParams:
    """Generator parameters for one resolution (the spec's table; hard difficulty by default)."""

    resolution: int
    padding: int
    seed_distance: int
    paddle_length: int
    paddle_thickness: float
    margins: tuple[int, ...]
    marker_radius: float
    continuity: float
    snake_contrast: float
    paddle_contrast: float
    distractor_constant: int
    contour_length: int = 14
    num_distractors: int | None = None  # None: distractor_constant // 4

    @property
    def distractor_length(self) -> int:
        return max(1, self.contour_length // 3)

    @property
    def n_distractors(self) -> int:
        if self.num_distractors is not None:
            return int(self.num_distractors)
        return self.distractor_constant // 4

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["margins"] = list(self.margins)
        d["distractor_length"] = self.distractor_length
        d["num_distractors"] = self.n_distractors
        return d


PRESETS: dict[int, PathfinderParams] = {
    32: PathfinderParams(32, 1, 7, 2, 0.5, (1,), 1.5, 1.0, 2.0, 0.75, 20),
    64: PathfinderParams(64, 1, 12, 5, 1.0, (1,), 2.5, 1.8, 0.8, 1.0, 22),
    128: PathfinderParams(128, 1, 20, 5, 1.5, (2, 3), 3.0, 1.8, 0.9, 1.0, 35),
    256: PathfinderParams(256, 22, 27, 5, 2.0, (3,), 5.0, 1.8, 1.0, 1.0, 30),
}


def pathfinder_params(resolution: int, difficulty: str = "hard",
                      num_distractors: int | None = None) -> PathfinderParams:
    """The parameter set for `resolution` (32, 64, 128, 256) and `difficulty`
    (easy, intermediate, hard = contour length 6, 9, 14)."""
    if resolution not in PRESETS:
        raise UserError(f"resolution {resolution} is not supported; use one of {list(PRESETS)}")
    if difficulty not in DIFFICULTIES:
        raise UserError(f"difficulty {difficulty!r} is not supported; use one of {list(DIFFICULTIES)}")
    return dataclasses.replace(PRESETS[resolution], contour_length=DIFFICULTIES[difficulty],
                               num_distractors=num_distractors)


def difficulty_of(contour_length: int) -> str:
    for name, length in DIFFICULTIES.items():
        if length == contour_length:
            return name
    return f"contour{contour_length}"


# ----------------------------------------------------------------------------------------------
# Geometry helpers
# ----------------------------------------------------------------------------------------------
def _seg_dist(px: np.ndarray, py: np.ndarray, ax: float, ay: float, bx: float, by: float) -> np.ndarray:
    """Distance from points (px, py) (broadcastable) to the segment a-b."""
    dx, dy = bx - ax, by - ay
    den = dx * dx + dy * dy
    if den <= 0.0:
        return np.hypot(px - ax, py - ay)
    t = np.clip(((px - ax) * dx + (py - ay) * dy) / den, 0.0, 1.0)
    return np.hypot(px - (ax + t * dx), py - (ay + t * dy))


def _bbox(x0: float, y0: float, x1: float, y1: float, r: float, size: int):
    xa = max(int(math.floor(min(x0, x1) - r)), 0)
    xb = min(int(math.ceil(max(x0, x1) + r)) + 1, size)
    ya = max(int(math.floor(min(y0, y1) - r)), 0)
    yb = min(int(math.ceil(max(y0, y1) + r)) + 1, size)
    return xa, xb, ya, yb


class _Field:
    """Occupancy (count of stamped, dilated paddles per pixel) and the snake-growing logic."""

    def __init__(self, p: PathfinderParams, margin: int, rng: np.random.Generator):
        self.p, self.m, self.rng = p, margin, rng
        self.R = p.resolution
        self.count = np.zeros((self.R, self.R), np.uint8)
        # exclusion radius: the spec's disk of radius m around the stroke, plus its half width
        # and half a pixel for the rasterized lookups
        self.excl = margin + p.paddle_thickness / 2 + 0.5
        L = p.paddle_length
        self.n_samples = max(3, int(math.ceil(2 * L)) + 1)
        self.lin = np.linspace(0.0, 1.0, self.n_samples)
        # candidate turns: one-pixel arc spacing on the circle of radius L + m, |dθ| < π/(2c)
        r = L + margin
        dth = 1.0 / r
        max_turn = math.pi / (2 * p.continuity)
        J = int(math.floor(max_turn / dth))
        self.turns = np.arange(-J, J + 1) * dth
        self.turn_w = np.cos(np.minimum(np.abs(self.turns) * p.continuity, math.pi / 2)) ** 2

    # occupancy ---------------------------------------------------------------------------
    def stamp(self, paddle: tuple[float, float, float, float], delta: int) -> None:
        x0, y0, x1, y1 = paddle
        e = self.excl
        xa, xb, ya, yb = _bbox(x0, y0, x1, y1, e, self.R)
        ys = np.arange(ya, yb, dtype=np.float64)[:, None]
        xs = np.arange(xa, xb, dtype=np.float64)[None, :]
        mask = _seg_dist(xs, ys, x0, y0, x1, y1) <= e
        view = self.count[ya:yb, xa:xb]
        if delta > 0:
            view[mask] += np.uint8(delta)
        else:
            view[mask] -= np.uint8(-delta)

    def free_points(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """True where every point of the last axis is inside the padded field and unoccupied."""
        pad, R = self.p.padding, self.R
        xi = np.rint(xs).astype(np.intp)
        yi = np.rint(ys).astype(np.intp)
        inb = (xi >= pad) & (xi < R - pad) & (yi >= pad) & (yi < R - pad)
        np.clip(xi, 0, R - 1, out=xi)
        np.clip(yi, 0, R - 1, out=yi)
        ok = inb & (self.count[yi, xi] == 0)
        return ok.all(axis=-1)

    def paddle_free(self, x0: float, y0: float, x1: float, y1: float) -> bool:
        xs = x0 + (x1 - x0) * self.lin
        ys = y0 + (y1 - y0) * self.lin
        return bool(self.free_points(xs, ys))

    # snakes ------------------------------------------------------------------------------
    def seed_paddle(self, lo: int, hi: int, tries: int = 20):
        """A first paddle whose tail is a free pixel in [lo, hi)², random whole-degree heading."""
        sub = self.count[lo:hi, lo:hi]
        free = np.flatnonzero(sub == 0)
        if free.size == 0:
            return None
        w = hi - lo
        for _ in range(tries):
            k = free[self.rng.integers(free.size)]
            y, x = divmod(int(k), w)
            x, y = float(x + lo), float(y + lo)
            th = math.radians(int(self.rng.integers(360)))
            pad = self.seed_from(x, y, th)
            if pad is not None:
                return pad
        return None

    def seed_from(self, x: float, y: float, th: float):
        L = self.p.paddle_length
        x1, y1 = x + L * math.cos(th), y + L * math.sin(th)
        if self.paddle_free(x, y, x1, y1):
            return (x, y, x1, y1, th)
        return None

    def next_paddle(self, last):
        x0, y0, x1, y1, th = last
        L, m = self.p.paddle_length, self.m
        px, py = x1 + m * math.cos(th), y1 + m * math.sin(th)  # pivot
        ang = th + self.turns
        c, s = np.cos(ang), np.sin(ang)
        tx, ty = px + m * c, py + m * s                     # tail (distance m from the pivot)
        hx, hy = px + (L + m) * c, py + (L + m) * s         # head (circle of radius L + m)
        xs = tx[:, None] + (hx - tx)[:, None] * self.lin
        ys = ty[:, None] + (hy - ty)[:, None] * self.lin
        w = self.turn_w * self.free_points(xs, ys)
        tot = w.sum()
        if tot <= 0:
            return None
        j = int(np.searchsorted(np.cumsum(w), self.rng.random() * tot, side="right"))
        j = min(j, len(w) - 1)
        return (float(tx[j]), float(ty[j]), float(hx[j]), float(hy[j]), float(ang[j]))

    def grow(self, first, n: int, backtracks: int) -> list | None:
        """Extend a snake from its first paddle to `n` paddles. All paddles but the last one are
        stamped while growing (so the next paddle may sit close to its predecessor); the whole
        snake is stamped on success and nothing is left stamped on failure."""
        snake = [first]
        budget = backtracks
        while len(snake) < n:
            nxt = self.next_paddle(snake[-1])
            if nxt is not None:
                self.stamp(snake[-1][:4], +1)
                snake.append(nxt)
                continue
            budget -= 1
            if budget < 0 or len(snake) == 1:
                for pad in snake[:-1]:
                    self.stamp(pad[:4], -1)
                return None
            snake.pop()
            self.stamp(snake[-1][:4], -1)  # the new last paddle is not stamped while growing
        self.stamp(snake[-1][:4], +1)
        return snake

    def unstamp(self, snake) -> None:
        for pad in snake:
            self.stamp(pad[:4], -1)


# ----------------------------------------------------------------------------------------------
# Rendering (2x supersampled, Lanczos downsample)
# ----------------------------------------------------------------------------------------------
def _draw_segment(canvas: np.ndarray, x0, y0, x1, y1, half_w: float, value: float) -> None:
    """Pixel-wise max of `value`·coverage of a thick segment into `canvas` (canvas coordinates)."""
    S = canvas.shape[0]
    xa, xb, ya, yb = _bbox(x0, y0, x1, y1, half_w + 1.0, S)
    if xa >= xb or ya >= yb:
        return
    ys = np.arange(ya, yb, dtype=np.float32)[:, None]
    xs = np.arange(xa, xb, dtype=np.float32)[None, :]
    cov = np.clip(half_w + 0.5 - _seg_dist(xs, ys, x0, y0, x1, y1), 0.0, 1.0) * value
    view = canvas[ya:yb, xa:xb]
    np.maximum(view, cov, out=view)


def _to2x(v: float) -> float:
    # 1x pixel i spans [i-0.5, i+0.5] and holds the 2x pixels 2i, 2i+1 (centres at 2i, 2i+1)
    return 2.0 * v + 0.5


def _downsample(canvas2: np.ndarray) -> np.ndarray:
    from PIL import Image

    R = canvas2.shape[0] // 2
    img = Image.fromarray(np.ascontiguousarray(canvas2, dtype=np.float32))
    out = np.asarray(img.resize((R, R), Image.Resampling.LANCZOS), dtype=np.float32)
    return np.maximum(out, 0.0)  # drop the Lanczos undershoot so the background stays 0


def render_paddles(paddles: Sequence[Sequence[float]], resolution: int, thickness: float,
                   value: float = 1.0) -> np.ndarray:
    """Render paddles ((x0, y0, x1, y1, ...) in pixel coordinates) to a float (R, R) image."""
    canvas = np.zeros((2 * resolution, 2 * resolution), np.float32)
    half_w = max(1, round(thickness * 2)) / 2.0
    for pad in paddles:
        _draw_segment(canvas, _to2x(pad[0]), _to2x(pad[1]), _to2x(pad[2]), _to2x(pad[3]),
                      half_w, value)
    return _downsample(canvas)


def _rescale_uint8(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.zeros(x.shape, np.uint8)
    return np.clip((x - lo) * (255.0 / (hi - lo)) + 0.5, 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# One image
# ----------------------------------------------------------------------------------------------
def _targets(field: _Field, p: PathfinderParams, pair_tries: int = 200):
    R, sd = p.resolution, p.seed_distance
    lo = max(p.padding, 2 * sd)
    hi = R - lo
    if hi <= lo:  # tiny images: fall back to the padded field
        lo, hi = p.padding, R - p.padding
    n, bt = p.contour_length, 4 * p.contour_length
    rng = field.rng
    for _ in range(pair_tries):
        first = field.seed_paddle(lo, hi)
        if first is None:
            continue
        s1 = field.grow(first, n, bt)
        if s1 is None:
            continue
        s2 = None
        for _ in range(10):
            phi = math.radians(int(rng.integers(360)))
            x, y = first[0] + sd * math.cos(phi), first[1] + sd * math.sin(phi)
            seed2 = field.seed_from(x, y, math.radians(int(rng.integers(360))))
            if seed2 is None:
                continue
            s2 = field.grow(seed2, n, bt)
            if s2 is not None:
                break
        if s2 is not None:
            return s1, s2
        field.unstamp(s1)  # regenerate the pair
    raise RuntimeError(f"could not place two target snakes at resolution {R} "
                       f"after {pair_tries} tries")


def generate_image(params: PathfinderParams, seed: int, index: int,
                   return_info: bool = False):
    """Generate image `index` of the stream `seed`: (uint8 (R, R) image, label) and, with
    `return_info`, a dict holding the snakes' geometry (for tests and debugging)."""
    p = params
    rng = np.random.default_rng([int(seed), int(index)])
    label = int(rng.integers(2))
    margin = int(p.margins[int(rng.integers(len(p.margins)))])
    field = _Field(p, margin, rng)
    s1, s2 = _targets(field, p)

    distractors = []
    dl = p.distractor_length
    for _ in range(p.n_distractors):
        if (field.count == 0).mean() < 0.01:
            break
        for _attempt in range(5):
            first = field.seed_paddle(p.padding, p.resolution - p.padding, tries=3)
            if first is None:
                continue
            snake = field.grow(first, dl, backtracks=2)
            if snake is not None:
                distractors.append(snake)
                break

    # markers: tail of the first paddle of target a, head of the last paddle of a (label 1) or b
    a = int(rng.integers(2))
    targets = (s1, s2)
    b = a if label == 1 else 1 - a
    m1 = targets[a][0][:2]
    m2 = targets[b][-1][2:4]

    R = p.resolution
    canvas = np.zeros((2 * R, 2 * R), np.float32)
    half_w = max(1, round(p.paddle_thickness * 2)) / 2.0
    t_val = p.paddle_contrast * p.snake_contrast
    d_val = p.snake_contrast
    for snake, val in ((s1, t_val), (s2, t_val), *((d, d_val) for d in distractors)):
        for pad in snake:
            _draw_segment(canvas, _to2x(pad[0]), _to2x(pad[1]), _to2x(pad[2]), _to2x(pad[3]),
                          half_w, val)
    mk_val = max(t_val, d_val)
    r2 = 2.0 * p.marker_radius
    for mx, my in (m1, m2):
        cx, cy = _to2x(mx), _to2x(my)
        _draw_segment(canvas, cx, cy, cx, cy, r2, mk_val)
    image = _rescale_uint8(_downsample(canvas))
    if not return_info:
        return image, label
    info = {
        "label": label,
        "margin": margin,
        "targets": [np.asarray(s, np.float64) for s in targets],
        "distractors": [np.asarray(s, np.float64) for s in distractors],
        "marker_snakes": (a, b),
        "markers": (tuple(map(float, m1)), tuple(map(float, m2))),
        "num_distractors": p.n_distractors,
        "num_distractors_placed": len(distractors),
    }
    return image, label, info


# ----------------------------------------------------------------------------------------------
# Many images: parallel generation, PNG (released layout) or .npy shards
# ----------------------------------------------------------------------------------------------
def level_dir(root: str | os.PathLike, resolution: int, contour_length: int) -> Path:
    return Path(root) / f"pathfinder{resolution}" / f"curv_contour_length_{contour_length}"


def _gen_chunk(args):
    params, seed, start, stop, png_dir, per_dir = args
    imgs, labels = [], []
    for i in range(start, stop):
        img, lab = generate_image(params, seed, i)
        labels.append(lab)
        if png_dir is None:
            imgs.append(img)
        else:
            from PIL import Image

            b, j = divmod(i, per_dir)
            d = Path(png_dir) / "imgs" / str(b)
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(d / f"sample_{j}.png")
    return start, (np.stack(imgs) if imgs else None), np.asarray(labels, np.uint8)


def _iter_chunks(params, seed, n, chunk, workers, png_dir, per_dir) -> Iterator:
    jobs = [(params, seed, s, min(s + chunk, n), png_dir, per_dir) for s in range(0, n, chunk)]
    if workers <= 1:
        for j in jobs:
            yield _gen_chunk(j)
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers) as pool:
        yield from pool.imap(_gen_chunk, jobs)


def generate_pathfinder(out: str | os.PathLike, resolution: int = 32, difficulty: str = "hard",
                        n: int = 1000, seed: int = 0, workers: int = 1, fmt: str = "npy",
                        num_distractors: int | None = None, shard_size: int = 1000,
                        per_dir: int = 1000, progress: bool = True) -> dict[str, Any]:
    """Generate `n` images into `out/pathfinder{R}/curv_contour_length_{L}/`.

    fmt="png": the released layout, `imgs/{b}/sample_{i}.png` (`per_dir` images per folder) and
    text metadata `metadata/{b}.npy` ("imgs/{b} sample_{i}.png {i} {label} ..." per line).
    fmt="npy": `shards/images_{k:05d}.npy` (uint8 (n, R, R)) + `shards/labels_{k:05d}.npy`.
    Both write `generator.json` (parameters incl. the number of distractors used). Returns a
    summary dict (counts, label balance, seconds, images/s)."""
    if fmt not in ("png", "npy"):
        raise ValueError(f"fmt {fmt!r} is not supported; use 'png' or 'npy'")
    params = pathfinder_params(resolution, difficulty, num_distractors)
    base = level_dir(out, resolution, params.contour_length)
    base.mkdir(parents=True, exist_ok=True)
    chunk = max(1, min(64 if resolution <= 64 else 16, shard_size))
    workers = max(1, int(workers))
    labels = np.zeros(n, np.uint8)
    t0 = time.perf_counter()
    buf_imgs: list[np.ndarray] = []
    buf_start, shard_id = 0, 0
    shard_dir = base / "shards"
    if fmt == "npy":
        shard_dir.mkdir(exist_ok=True)

    def flush(force: bool = False):
        nonlocal buf_imgs, buf_start, shard_id
        total = sum(len(x) for x in buf_imgs)
        while total >= shard_size or (force and total > 0):
            allimgs = np.concatenate(buf_imgs)
            take = min(shard_size, total)
            np.save(shard_dir / f"images_{shard_id:05d}.npy", allimgs[:take])
            np.save(shard_dir / f"labels_{shard_id:05d}.npy", labels[buf_start:buf_start + take])
            buf_imgs = [allimgs[take:]] if take < total else []
            buf_start += take
            shard_id += 1
            total -= take

    prog = None
    if progress:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        prog = Progress(TextColumn("[bold]pathfinder{task.fields[res]} {task.fields[diff]}"),
                        BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                        TimeElapsedColumn(), TimeRemainingColumn())
        prog.start()
        task = prog.add_task("gen", total=n, res=resolution, diff=difficulty, rate="")
    try:
        done = 0
        for start, imgs, labs in _iter_chunks(params, seed, n, chunk, workers,
                                              str(base) if fmt == "png" else None, per_dir):
            labels[start:start + len(labs)] = labs
            done += len(labs)
            if fmt == "npy":
                buf_imgs.append(imgs)
                flush()
            if prog is not None:
                rate = done / max(time.perf_counter() - t0, 1e-9)
                prog.update(task, advance=len(labs), rate=f"{rate:.1f} img/s")
        if fmt == "npy":
            flush(force=True)
    finally:
        if prog is not None:
            prog.stop()
    if fmt == "png":
        meta = base / "metadata"
        meta.mkdir(exist_ok=True)
        for b in range((n + per_dir - 1) // per_dir):
            lines = []
            for i in range(b * per_dir, min((b + 1) * per_dir, n)):
                j = i - b * per_dir
                lines.append(f"imgs/{b} sample_{j}.png {j} {int(labels[i])} {params.contour_length} "
                             f"{params.distractor_length} {params.paddle_length} "
                             f"{params.paddle_thickness} {params.n_distractors}\n")
            (meta / f"{b}.npy").write_text("".join(lines))
    seconds = time.perf_counter() - t0
    summary = {
        "dir": str(base), "format": fmt, "resolution": resolution, "difficulty": difficulty,
        "n": n, "seed": seed, "workers": workers, "positives": int(labels.sum()),
        "seconds": round(seconds, 3), "images_per_s": round(n / max(seconds, 1e-9), 2),
        "params": params.to_dict(),
    }
    (base / "generator.json").write_text(json.dumps(summary, indent=2))
    return summary


# ----------------------------------------------------------------------------------------------
# Loading: generated shards, generated PNGs or the original LRA release
# ----------------------------------------------------------------------------------------------
def _find_level(root: Path, resolution: int | None, contour_length: int | None) -> Path:
    def is_level(d: Path) -> bool:
        return (d / "metadata").is_dir() or (d / "shards").is_dir()

    if is_level(root):
        return root
    cl = contour_length if contour_length is not None else 14
    cands = []
    if resolution is not None:
        cands += [root / f"curv_contour_length_{cl}", level_dir(root, resolution, cl),
                  root / f"lra_release/pathfinder{resolution}/curv_contour_length_{cl}"]
    else:
        cands += [root / f"curv_contour_length_{cl}", *sorted(root.glob(f"pathfinder*/curv_contour_length_{cl}"))]
    for c in cands:
        if is_level(c):
            return c
    raise FileNotFoundError(
        f"no Pathfinder data under {root}: expected `pathfinder{{R}}/curv_contour_length_{{L}}/` "
        "holding either `metadata/*.npy` + `imgs/{b}/sample_{i}.png` (the LRA release layout) or "
        "`shards/images_*.npy` + `shards/labels_*.npy` (fa-data pathfinder --format npy)")


class PathfinderImages:
    """Random access to Pathfinder images and labels from a level directory (either format).

    `root` may be the level directory itself or a folder holding `pathfinder{R}/...`."""

    def __init__(self, root: str | os.PathLike, resolution: int | None = None,
                 contour_length: int | None = None):
        self.dir = _find_level(Path(root), resolution, contour_length)
        self._shards: list[np.ndarray] | None = None
        self._paths: list[Path] | None = None
        shard_dir = self.dir / "shards"
        if shard_dir.is_dir() and sorted(shard_dir.glob("images_*.npy")):
            imgs = sorted(shard_dir.glob("images_*.npy"))
            self._shards = [np.load(f, mmap_mode="r") for f in imgs]
            self.labels = np.concatenate(
                [np.load(f.with_name(f.name.replace("images_", "labels_"))) for f in imgs]
            ).astype(np.int64)
            self._offsets = np.cumsum([0] + [len(s) for s in self._shards])
            self.resolution = int(self._shards[0].shape[-1])
        else:
            rows = []
            for mf in (self.dir / "metadata").glob("*.npy"):
                for line in mf.read_text().splitlines():
                    parts = line.split()
                    if len(parts) < 4:
                        continue
                    sub, fname, label = parts[0], parts[1], int(parts[3])
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


# ----------------------------------------------------------------------------------------------
# Montage and CLI
# ----------------------------------------------------------------------------------------------
def write_montage(path: str | os.PathLike, images: Sequence[np.ndarray], labels: Sequence[int],
                  cols: int = 8, title: str | None = None) -> Path:
    """A grid PNG of images with their labels as titles, for checking by eye."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n = len(images)
    cols = max(1, min(cols, n))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2 * cols, 2.2 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k < n:
            ax.imshow(images[k], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
            ax.set_title(f"label {int(labels[k])} ({'same' if labels[k] else 'different'})",
                         fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cli(args) -> int:
    from rich.console import Console
    from rich.table import Table

    summary = generate_pathfinder(args.out, args.resolution, args.difficulty, args.n, args.seed,
                                  args.workers, args.format, args.num_distractors,
                                  progress=not args.no_progress)
    if args.montage:
        src = PathfinderImages(summary["dir"])
        k = min(len(src), args.montage_n)
        write_montage(args.montage, [src[i] for i in range(k)], src.labels[:k],
                      title=f"pathfinder{args.resolution} {args.difficulty} seed {args.seed}")
        summary["montage"] = str(args.montage)
    table = Table(title="fa-data pathfinder")
    table.add_column("key")
    table.add_column("value")
    for key in ("dir", "format", "resolution", "difficulty", "n", "positives", "workers",
                "seconds", "images_per_s", "montage"):
        if key in summary:
            table.add_row(key, str(summary[key]))
    table.add_row("num_distractors", str(summary["params"]["num_distractors"]))
    Console().print(table)
    return 0


def register_cli(subparsers) -> None:
    """Add `fa-data pathfinder ...` to an argparse subparsers object (handler in `func`)."""
    p = subparsers.add_parser("pathfinder", help="generate Pathfinder / Path-X / Path-256 images")
    p.add_argument("--resolution", type=int, default=32, choices=list(RESOLUTIONS))
    p.add_argument("--difficulty", default="hard", choices=list(DIFFICULTIES))
    p.add_argument("--n", type=int, default=1000, help="number of images")
    p.add_argument("--out", required=True, help="output root (pathfinder{R}/... is created in it)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--format", default="npy", choices=["png", "npy"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-distractors", type=int, default=None,
                   help="override K // 4 from the spec table (e.g. 17 for the Path-X variant)")
    p.add_argument("--montage", default=None, help="write a grid PNG of the first images here")
    p.add_argument("--montage-n", type=int, default=32)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cli)
