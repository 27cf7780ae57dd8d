"""Growing snakes on an occupancy mask: the geometry of the original Pathfinder generator
(Linsley et al. 2018; drewlinsley/pathfinder `snakes.py` / `snakes2.py`), re-implemented.

Coordinates are integer (row, col). A snake is a chain of paddles; each step, from the pivot
`L + 2m` beyond the previous pivot, the candidate heads are the distinct integer points of the
circle of radius `L + m` (one-pixel arc spacing, truncated to integers); a candidate's weight is
(1 - occupancy dilated by a disk of radius m) · max(cos(min(turn·continuity, π/2)), 0)². A drawn
paddle runs from its head back toward the pivot and is kept when the occupancy plus its own
footprint stays below 1.8 anywhere (3 draws). A paddle's footprint enters the occupancy only when
the next paddle of its snake is accepted, and the last paddle's when the snake is complete.

A seed pixel is drawn uniformly among the pixels whose whole seed footprint (the saturated part
of the paddle's occupancy, offset as in the original) avoids occupancy above 0.3. As with the
original's OpenCV dilation, a footprint that leaves some pixel of the image with no tap inside it
yields no seed at all for that angle.

The two targets start `seed_distance` apart and grow alternately, a paddle at a time; any failure
restarts the pair. Only the second target's last footprint is added at the end, so the targets may
touch. Distractors are grown one at a time (5 attempts each), never backtracking.

The growth loop runs compiled (`grow`) on the tables of `Tables.geometry`, every one computed
here with NumPy once per (params, margin); `grow_snakes` turns its output into `Snake`s.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from fa_train.data.lra.pathfinder.params import PathfinderParams
from fa_train.data.lra.pathfinder.render import Stamp, dilate_binary, disk_offsets, paddle_stamp


def reverse(angle: float) -> float:
    """The opposite direction, kept in [-π, π)."""
    return angle + math.pi if angle + math.pi < math.pi else angle - math.pi


def flip(angle: float) -> float:
    """The opposite direction of a candidate's angle (from arctan2)."""
    return angle + math.pi if angle < 0 else angle - math.pi


@dataclass
class Snake:
    """Paddles as drawn: start pixel and drawing angle; `headings` are the growth directions."""

    starts: list[tuple[int, int]] = field(default_factory=list)
    angles: list[float] = field(default_factory=list)
    headings: list[float] = field(default_factory=list)


class Geometry(NamedTuple):
    """What the compiled growth loop reads (`grow`). A paddle id (pid) is a ring candidate
    (< n_ring) or a seed paddle at a whole degree (n_ring + degree + 180); masks are flat and
    padded by `pad` pixels."""

    R: int
    W: int                  # padded width
    pad: int
    half: int               # every stamp's half size
    ring: np.ndarray        # (n_ring, 2) candidate heads from the pivot
    disk: np.ndarray        # flat taps of the margin disk around a head
    weights: np.ndarray     # (n_pid, n_ring) turn weights after a paddle
    pivot_d: np.ndarray     # (n_pid, 2) from a pivot to the next, before rounding up
    core_taps: np.ndarray   # (n_ring, k) flat taps from the pivot that can refuse the candidate
    core_vals: np.ndarray   # (n_ring, k) its footprint there
    stamps: np.ndarray      # (n_pid, (2 half + 1)²) footprints
    seed_d: np.ndarray      # (360, 4) per degree + 180: tail to head, head to pivot
    second_d: np.ndarray    # (360, 2) per degree: first target's seed to the second's
    free_start: np.ndarray  # (361,) per degree + 180: a range of `free`
    free: np.ndarray        # row-major free pixels (y·R + x) of the first target's seed
    foot_start: np.ndarray  # (361,) per degree + 180: a range of `foot`
    foot: np.ndarray        # (k, 3) seed footprint offsets as runs: dy, dx from, dx to
    covered: np.ndarray     # (360,) whether a seed footprint leaves every pixel a tap inside
    blank: np.ndarray       # the empty mask: image padding occupied
    paddle_retries: int
    distractor_retries: int
    stop_free_fraction: float


class Tables:
    """Everything that depends only on (params, margin): candidate ring, dilation disk, stamps,
    seed footprints and free pixels, all gathered in `geometry`."""

    def __init__(self, p: PathfinderParams, margin: int):
        from fa_train.data.lra.pathfinder.grow import ACCEPT_BELOW, BUSY_ABOVE  # numba: only to grow

        self.p, self.m = p, margin
        self.R = R = p.resolution
        L = p.paddle_length
        self.pad = L + 3 * margin + int(math.ceil(p.paddle_thickness)) + 4
        self.width = W = R + 2 * self.pad
        r = L + margin
        step = 360.0 / (2 * r * np.pi)
        rad = np.arange(0, 360, step) * np.pi / 180
        # integer offsets of the circle's samples; an in-bounds sample truncates to its floor
        ring = np.stack([np.floor(r * np.sin(rad)), np.floor(r * np.cos(rad))], 1).astype(np.int64)
        ring = np.unique(ring, axis=0)
        self.ring_angle = np.arctan2(ring[:, 0], ring[:, 1])
        ring_heading = self.ring_angle.tolist()
        seed_angles = [d * np.pi / 180 for d in range(-180, 180)]
        # per paddle id: drawing angle and growth heading
        self.angles = [flip(a) for a in ring_heading] + seed_angles
        self.headings = ring_heading + seed_angles
        self._stamps: dict[float, Stamp] = {}
        half = L + int(math.ceil(p.paddle_thickness)) + margin  # every stamp's half size
        disk = disk_offsets(margin)
        # a pixel can refuse a candidate's paddle only where even full occupancy (1.0) plus the
        # footprint reaches ACCEPT_BELOW: those "core" taps per candidate, from its pivot, padded
        # with the head pixel and a footprint of 0
        span = np.arange(-half, half + 1)
        stamp_taps = (span[:, None] * W + span[None, :]).reshape(-1)
        ring_flat = ring[:, 0] * W + ring[:, 1]
        masks = [self.stamp(a).mask.reshape(-1) for a in self.angles[:len(ring)]]
        cores = [np.flatnonzero(1.0 + m >= ACCEPT_BELOW) for m in masks]
        core_taps = np.repeat(ring_flat[:, None], max(1, *map(len, cores)), axis=1)
        core_vals = np.zeros(core_taps.shape)
        for c, (core, m) in enumerate(zip(cores, masks)):
            core_taps[c, :len(core)] += stamp_taps[core]
            core_vals[c, :len(core)] = m[core]
        base = np.zeros((R, R))
        pd = p.padding
        base[:pd, :], base[-pd:, :], base[:, :pd], base[:, -pd:] = 1, 1, 1, 1
        blank = np.zeros((W, W))
        blank[self.pad:self.pad + R, self.pad:self.pad + R] = base
        band = base.copy()
        sd2 = 2 * p.seed_distance
        band[:sd2, :], band[R - sd2:, :], band[:, :sd2], band[:, R - sd2:] = 1, 1, 1, 1
        self.target_busy = band > BUSY_ABOVE
        feet = [self.footprint(a) for a in seed_angles]
        runs = [_runs(o) for o, _ in feet]
        free = [self.target_free(*f) for f in feet]
        d1, d2 = float(L + 2 * margin), float(L + margin)
        self.geometry = Geometry(
            R=R, W=W, pad=self.pad, half=half, ring=ring,
            disk=disk[:, 0] * W + disk[:, 1],
            weights=np.stack([self.turn_weights(h) for h in self.headings]),
            pivot_d=np.array([(d1 * math.sin(h), d1 * math.cos(h)) for h in self.headings]),
            core_taps=core_taps, core_vals=core_vals,
            stamps=np.stack([self.stamp(a).mask.reshape(-1) for a in self.angles]),
            seed_d=np.array([(float(L) * math.sin(a), float(L) * math.cos(a),
                              d2 * math.sin(reverse(a)), d2 * math.cos(reverse(a))) for a in seed_angles]),
            second_d=np.array([self.second_offset(d) for d in range(360)]),
            free_start=np.cumsum([0] + [len(f) for f in free]),
            free=np.concatenate([f[:, 0] * R + f[:, 1] for f in free]).astype(np.int64),
            foot_start=np.cumsum([0] + [len(r) for r in runs]),
            foot=np.concatenate(runs).astype(np.int64).reshape(-1, 3),
            covered=np.array([c for _, c in feet]),
            blank=blank.reshape(-1),
            paddle_retries=p.paddle_retries, distractor_retries=p.distractor_retries,
            stop_free_fraction=float(p.stop_free_fraction))

    def stamp(self, angle: float) -> Stamp:
        st = self._stamps.get(angle)
        if st is None:
            p = self.p
            st = self._stamps[angle] = paddle_stamp(angle, p.paddle_length, p.paddle_thickness, self.m,
                                                    p.antialias)
        return st

    def second_offset(self, degree: int) -> tuple[float, float]:
        """(dy, dx) from the first target's seed to the second's, before rounding."""
        phi, sd = degree * np.pi / 180, self.p.seed_distance
        return sd * np.sin(phi), sd * np.cos(phi)

    def turn_weights(self, heading: float) -> np.ndarray:
        d = np.abs(self.ring_angle - heading)
        d = np.minimum(np.minimum(d, 2 * np.pi - d) * self.p.continuity, 0.5 * np.pi)
        return np.maximum(np.cos(d), 0) ** 2

    def footprint(self, angle: float) -> tuple[np.ndarray, bool]:
        """Seed footprint offsets for a paddle at `angle`, and whether every pixel of the image
        keeps at least one of its taps inside the image."""
        st = self.stamp(angle)
        k = self.p.paddle_length + self.m
        # the footprint kernel is the paddle's occupancy drawn from (k+1, k+1) on a
        # (2k+1)² kernel anchored at (k, k); only its saturated pixels count
        rows = np.arange(2 * k + 1) - (k + 1) + st.half
        sat = st.mask[np.ix_(rows, rows)] == 1.0
        offsets = np.argwhere(sat) - k
        return offsets, _any_tap_inside(self.R, offsets)

    def target_free(self, offsets: np.ndarray, covered: bool) -> np.ndarray:
        """Row-major (n, 2) free pixels for the first target's seed with this `footprint`."""
        if not covered:
            return np.zeros((0, 2), np.int64)
        return np.argwhere(~dilate_binary(self.target_busy, offsets))

    def snake(self, rows: np.ndarray) -> Snake:
        """A Snake from the compiled loop's rows (y, x, pid)."""
        pids = rows[:, 2].tolist()
        return Snake([(y, x) for y, x in rows[:, :2].tolist()], [self.angles[i] for i in pids],
                     [self.headings[i] for i in pids])


@functools.lru_cache(maxsize=32)
def tables(p: PathfinderParams, margin: int) -> Tables:
    return Tables(p, margin)


def _any_tap_inside(n: int, offsets: np.ndarray) -> bool:
    if len(offsets) == 0:
        return False
    # pixel (y, x) keeps a tap iff some offset has both y + dy and x + dx inside
    grid = np.arange(n)[:, None]
    inside_y = ((grid + offsets[None, :, 0] >= 0) & (grid + offsets[None, :, 0] < n)).astype(np.int32)
    inside_x = ((grid + offsets[None, :, 1] >= 0) & (grid + offsets[None, :, 1] < n)).astype(np.int32)
    return bool(((inside_y @ inside_x.T) > 0).all())


def _runs(offsets: np.ndarray) -> np.ndarray:
    """(dy, first dx, last dx) of every run of consecutive dx among row-major `offsets`."""
    if len(offsets) == 0:
        return np.zeros((0, 3), np.int64)
    dy, dx = offsets[:, 0], offsets[:, 1]
    new = np.ones(len(offsets), bool)
    new[1:] = (dy[1:] != dy[:-1]) | (dx[1:] != dx[:-1] + 1)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(offsets)) - 1
    return np.stack([dy[starts], dx[starts], dx[ends]], 1)


def grow_snakes(t: Tables, rng: np.random.Generator, legacy: bool = False):
    """The targets, the placed distractors and the number of pair attempts of one image, drawn
    from `rng` (with `legacy`, integers as a RandomState on its bit generator draws them)."""
    from fa_train.data.lra.pathfinder.grow import grow_image

    p = t.p
    targets = np.zeros((2, p.contour_length, 3), np.int64)
    distractors = np.zeros((p.n_distractors, p.distractor_length, 3), np.int64)
    occ = np.empty(t.width * t.width)
    attempts, placed = grow_image(t.geometry, rng, legacy, occ, targets, distractors)
    return (t.snake(targets[0]), t.snake(targets[1])), [t.snake(s) for s in distractors[:placed]], attempts
