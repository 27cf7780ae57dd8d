"""What a Pathfinder image looks like, in numbers: per-image measurements and their summary.

Used to compare generators (this one and the original) and to pin the distribution in tests.
Each measurement is made per image, so a summary's standard error is std / sqrt(n).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

BRIGHT = 128          # a "bright blob" is an 8-connected region of pixels above this
TOUCH_FRACTION = 0.25  # two targets touch where both exceed this share of their own peak
SCALARS = ("nonzero_share", "mean_nonzero", "bright_blobs", "distractors_placed", "touching",
           "target_peak", "distractor_peak", "marker_centre", "mean_turn_deg")


def snake_turns(snakes) -> list[float]:
    """Every accepted turn (radians, 0..π) between consecutive paddles of the snakes."""
    out: list[float] = []
    for s in snakes:
        d = np.abs(np.diff(np.asarray(s.headings, np.float64)))
        out += np.minimum(d, 2 * np.pi - d).tolist()
    return out


def count_blobs(mask: np.ndarray) -> int:
    """Number of 8-connected components of a boolean image."""
    seen = np.zeros_like(mask)
    h, w = mask.shape
    count = 0
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        count += 1
        seen[y0, x0] = True
        stack = [(y0, x0)]
        while stack:
            y, x = stack.pop()
            for v in range(max(y - 1, 0), min(y + 2, h)):
                for u in range(max(x - 1, 0), min(x + 2, w)):
                    if mask[v, u] and not seen[v, u]:
                        seen[v, u] = True
                        stack.append((v, u))
    return count


def measure(image: np.ndarray, targets: np.ndarray, distractors: np.ndarray,
            markers: Sequence[Sequence[int]], placed: int, turns: Iterable[float],
            marker_radius: float) -> dict[str, float]:
    """Per-image measurements. `targets` (2, R, R) and `distractors` (R, R) are the float stroke
    layers, `markers` the two marker centres (row, col), `turns` the accepted turns in radians."""
    img = image.astype(np.float64)
    nz = img[img > 0]
    yy, xx = np.mgrid[:image.shape[0], :image.shape[1]]
    away = np.ones(image.shape, bool)
    for my, mx in markers:
        away &= np.hypot(yy - my, xx - mx) > marker_radius + 1.5
    tgt = targets.max(axis=0)
    on_target = away & (tgt > 0) & (tgt >= distractors)
    on_distractor = away & (distractors > tgt)
    t0, t1 = targets
    touching = (t0 > TOUCH_FRACTION * t0.max()) & (t1 > TOUCH_FRACTION * t1.max())
    turns = np.degrees(np.asarray(list(turns), np.float64))
    return {
        "nonzero_share": float((img > 0).mean()),
        "mean_nonzero": float(nz.mean()) if nz.size else math.nan,
        "bright_blobs": float(count_blobs(img > BRIGHT)),
        "distractors_placed": float(placed),
        "touching": float(touching.any()),
        "target_peak": float(img[on_target].max()) if on_target.any() else math.nan,
        "distractor_peak": float(img[on_distractor].max()) if on_distractor.any() else math.nan,
        "marker_centre": float(np.mean([img[my, mx] for my, mx in markers])),
        "mean_turn_deg": float(turns.mean()) if turns.size else math.nan,
    }


def summarize(rows: list[dict[str, float]], images: np.ndarray, turns_rad: np.ndarray,
              labels: np.ndarray, max_distractors: int) -> dict[str, Any]:
    """Mean and standard error of each per-image measurement, plus pooled distributions."""
    out: dict[str, Any] = {"n": len(rows)}
    for key in SCALARS:
        v = np.asarray([r[key] for r in rows], np.float64)
        v = v[~np.isnan(v)]
        out[key] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)),
                    "se": float(v.std(ddof=1) / math.sqrt(len(v))), "n": int(v.size)}
    placed = np.asarray([r["distractors_placed"] for r in rows], int)
    out["distractors_placed_hist"] = (np.bincount(placed, minlength=max_distractors + 1)
                                      / len(placed)).tolist()
    deg = np.degrees(turns_rad)
    out["turn_deg"] = {"median": float(np.median(deg)), "p90": float(np.percentile(deg, 90)),
                       "max": float(deg.max()), "distinct": int(np.unique(np.round(deg, 6)).size),
                       "hist_10deg": (np.histogram(deg, bins=np.arange(0, 100, 10))[0]
                                      / deg.size).tolist()}
    out["intensity_hist_16"] = (np.bincount(images.reshape(-1) // 16, minlength=16)
                                / images.size).tolist()
    out["positive_share"] = float(np.mean(labels))
    return out
