"""Readers of a training run's metrics.csv (one row per logged step; columns such as step,
time/train_s, train/loss, val/acc): curves, times per step, and where a loss stopped being finite.
A finished run keeps it gzip-compressed as metrics.csv.gz (`compress`); the readers take either."""
from __future__ import annotations

import csv
import gzip
import math
import os
from pathlib import Path

TRAIN_LOSS_KEYS = ["train/loss", "train_loss", "loss", "train/loss_step"]


def nonfinite_from_step(path: Path) -> int | None:
    """The step from which every training loss logged in a metrics.csv is not finite, when the
    last two or more are (one NaN at the end may be a skipped fp16 step); else None."""
    xs, ys = read_loss_csv(path, TRAIN_LOSS_KEYS)
    n = len(ys)
    while n and not math.isfinite(ys[n - 1]):
        n -= 1
    return int(xs[n]) if len(ys) - n >= 2 else None


def stored(path: Path) -> Path:
    """Where a metrics.csv's rows are: `path`, or `path` + ".gz" when only that exists."""
    packed = path.with_name(path.name + ".gz")
    return packed if not path.exists() and packed.exists() else path


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a metrics.csv or of its compressed form (none when neither exists)."""
    path = stored(Path(path))
    if not path.exists():
        return []
    with (gzip.open(path, "rt", newline="") if path.suffix == ".gz" else open(path, newline="")) as fh:
        return list(csv.DictReader(fh))


def compress_if_finished(run_dir: Path, kind: str | None, status: str | None) -> None:
    """`compress` a training run's metrics.csv unless the run is paused (its next stretch appends)."""
    if kind == "train" and status != "paused":
        compress(Path(run_dir) / "metrics.csv")


def compress(path: Path) -> Path | None:
    """Replace a finished run's metrics.csv by metrics.csv.gz (the same bytes inside, about a
    quarter of the size, no timestamp: the same file for the same rows); None when there is none.
    A paused run keeps the plain file: its next stretch appends to it."""
    path = Path(path)
    if not path.is_file():
        return None
    packed = path.with_name(path.name + ".gz")
    tmp = packed.with_name(packed.name + ".tmp")
    with open(path, "rb") as src, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        out.write(src.read())
    os.replace(tmp, packed)
    path.unlink()
    return packed


def _number(row: dict[str, str], key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def _points(rows: list[dict[str, str]], key: str, x_key: str) -> list[tuple[float, float, float]]:
    points = []
    for i, r in enumerate(rows):
        step = _number(r, "step")
        step = step if step is not None else _number(r, "trainer/global_step")
        step = step if step is not None else float(i)
        x, y = step if x_key == "step" else _number(r, x_key), _number(r, key)
        if x is not None and y is not None:
            points.append((step, x, y))
    return points


def curve_points(path: Path, key: str, x_key: str) -> list[tuple[float, float, float]]:
    """(step, x, value) of each row of a metrics.csv that has `key` and `x_key`, in file order; the
    step is the row's number where the file has no step column."""
    return _points(read_rows(path), key, x_key)


def seconds_per_step(path: Path, until_step: int | None = None) -> float | None:
    """Training seconds per optimizer step of a metrics.csv (its time/train_s against step),
    over the rows before `until_step` when given; None without two such rows."""
    points = [(step, t) for step, _, t in curve_points(path, "time/train_s", "step")
              if until_step is None or step < until_step]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def read_loss_csv(path: Path, keys: list[str], x_key: str = "step") -> tuple[list[float], list[float]]:
    """(x, values) of the first column in `keys` present in a metrics.csv, x from column `x_key`
    (the optimizer step by default); rows without both are skipped."""
    rows = read_rows(path)
    key = next((k for k in keys if rows and k in rows[0]), None)
    points = _points(rows, key, x_key) if key else []
    return [x for _, x, _ in points], [y for _, _, y in points]
