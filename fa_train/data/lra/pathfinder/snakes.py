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

`rng` needs `integers(low, high)` and `random()` (a numpy Generator; a RandomState adapter gives
the original's exact stream).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from fa_train.data.lra.pathfinder.params import PathfinderParams
from fa_train.data.lra.pathfinder.render import (Stamp, dilate_binary, disk_offsets, paddle_stamp,
                                                 paste_max, translate)

ACCEPT_BELOW = 1.8  # max of occupancy + footprint for a paddle to be kept
BUSY_ABOVE = 0.3    # occupancy above which a pixel cannot take a seed
MIN_WEIGHT = 1e-4   # total candidate weight below which a snake is at a dead end


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
    pivot: tuple[int, int] = (0, 0)

    def add(self, start: tuple[int, int], angle: float, heading: float, pivot: tuple[int, int]) -> None:
        self.starts.append(start)
        self.angles.append(angle)
        self.headings.append(heading)
        self.pivot = pivot


class Tables:
    """Everything that depends only on (params, margin): candidate ring, dilation disk, stamps,
    seed footprints and the target seeds' free pixels per angle."""

    def __init__(self, p: PathfinderParams, margin: int):
        self.p, self.m = p, margin
        self.R = p.resolution
        L = p.paddle_length
        self.pad = L + 3 * margin + int(math.ceil(p.paddle_thickness)) + 4
        self.width = self.R + 2 * self.pad
        r = L + margin
        step = 360.0 / (2 * r * np.pi)
        rad = np.arange(0, 360, step) * np.pi / 180
        # integer offsets of the circle's samples; an in-bounds sample truncates to its floor
        off = np.unique(np.stack([np.floor(r * np.sin(rad)), np.floor(r * np.cos(rad))], 1).astype(int),
                        axis=0)
        self.ring_dy, self.ring_dx = off[:, 0], off[:, 1]
        self.ring_angle = np.arctan2(off[:, 0], off[:, 1])
        disk = disk_offsets(margin)
        # flat offsets (in the padded mask) of the disk taps around every candidate head
        self.ring_taps = ((self.ring_dy[:, None] + disk[None, :, 0]) * self.width
                          + self.ring_dx[:, None] + disk[None, :, 1])
        self._weights: dict[float, np.ndarray] = {}
        self._footprints: dict[float, tuple[np.ndarray, bool]] = {}
        self._target_free: dict[int, np.ndarray] = {}
        base = np.zeros((self.R, self.R))
        pd = p.padding
        base[:pd, :], base[-pd:, :], base[:, :pd], base[:, -pd:] = 1, 1, 1, 1
        self.base_mask = base
        band = base.copy()
        sd2 = 2 * p.seed_distance
        band[:sd2, :], band[self.R - sd2:, :], band[:, :sd2], band[:, self.R - sd2:] = 1, 1, 1, 1
        self.target_busy = band > BUSY_ABOVE

    def stamp(self, angle: float) -> Stamp:
        p = self.p
        return paddle_stamp(angle, p.paddle_length, p.paddle_thickness, self.m, p.antialias)

    def turn_weights(self, heading: float) -> np.ndarray:
        w = self._weights.get(heading)
        if w is None:
            d = np.abs(self.ring_angle - heading)
            d = np.minimum(np.minimum(d, 2 * np.pi - d) * self.p.continuity, 0.5 * np.pi)
            w = self._weights[heading] = np.maximum(np.cos(d), 0) ** 2
        return w

    def footprint(self, angle: float) -> tuple[np.ndarray, bool]:
        """Seed footprint offsets for a paddle at `angle`, and whether every pixel of the image
        keeps at least one of its taps inside the image."""
        fp = self._footprints.get(angle)
        if fp is None:
            st = self.stamp(angle)
            k = self.p.paddle_length + self.m
            # the footprint kernel is the paddle's occupancy drawn from (k+1, k+1) on a
            # (2k+1)² kernel anchored at (k, k); only its saturated pixels count
            rows = np.arange(2 * k + 1) - (k + 1) + st.half
            sat = st.mask[np.ix_(rows, rows)] == 1.0
            offsets = np.argwhere(sat) - k
            covered = _any_tap_inside(self.R, offsets)
            fp = self._footprints[angle] = (offsets, covered)
        return fp

    def target_free(self, degree: int) -> np.ndarray:
        """Row-major (n, 2) free pixels for the first target's seed at `degree`."""
        free = self._target_free.get(degree)
        if free is None:
            offsets, covered = self.footprint(degree * np.pi / 180)
            free = (np.argwhere(~dilate_binary(self.target_busy, offsets)) if covered
                    else np.zeros((0, 2), int))
            self._target_free[degree] = free
        return free


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


class Field:
    """The occupancy mask (float, padded with zeros) and the snakes grown on it."""

    def __init__(self, t: Tables, rng):
        self.t, self.p, self.rng = t, t.p, rng
        self.mask = np.zeros((t.width, t.width))
        self.inner = self.mask[t.pad:t.pad + t.R, t.pad:t.pad + t.R]
        self.inner[...] = t.base_mask
        self.flat = self.mask.reshape(-1)
        self.blank = self.mask.copy()
        reach = t.p.paddle_length + t.m + 1
        self.central = range(reach, t.R - reach)  # pivots whose whole candidate ring is inside

    def reset(self) -> None:
        self.mask[...] = self.blank

    # -- occupancy ---------------------------------------------------------------------------
    def occupy(self, start: tuple[int, int], angle: float) -> None:
        paste_max(self.inner, self.t.stamp(angle).mask, *start)

    def fits(self, st: Stamp, y: int, x: int) -> bool:
        a, h = self.t.pad, st.half
        region = self.mask[y + a - h:y + a + h + 1, x + a - h:x + a + h + 1]
        return bool((region + st.mask).max() < ACCEPT_BELOW)

    def in_image(self, *points: tuple[int, int]) -> bool:
        R = self.t.R
        return all(0 <= y < R and 0 <= x < R for y, x in points)

    # -- seeds -------------------------------------------------------------------------------
    def seed_distractor(self) -> Snake | None:
        """First paddle of a distractor (the original's `seed_snake`), or None."""
        p, t, R = self.p, self.t, self.t.R
        lined = self.inner > BUSY_ABOVE
        lined[0, :], lined[-1, :], lined[:, 0], lined[:, -1] = True, True, True, True
        scarce = (self.inner <= BUSY_ABOVE).sum() / (R * R) < p.stop_free_fraction
        for _ in range(p.paddle_retries + 1):
            angle = int(self.rng.integers(-180, 180)) * np.pi / 180
            if scarce:
                return None
            offsets, covered = t.footprint(angle)
            if not covered:
                return None
            free = np.flatnonzero(~dilate_binary(lined, offsets))
            if free.size == 0:
                return None
            k = int(free[int(self.rng.integers(0, free.size))])
            snake = self._seed_at(divmod(k, R), angle)
            if snake is not None:
                return snake
        return None

    def _seed_at(self, tail: tuple[int, int], angle: float) -> Snake | None:
        L = self.p.paddle_length
        head = translate(*tail, angle, L)
        pivot = translate(*head, reverse(angle), L + self.t.m)
        if not self.in_image(head, pivot):
            return None
        s = Snake()
        s.add(tail, angle, angle, pivot)
        return s

    def seed_targets(self) -> tuple[Snake, Snake] | None:
        """First paddles of the two targets (the original's `initialize_two_seeds`), or None."""
        p = self.p
        first = None
        for _ in range(p.paddle_retries + 1):
            degree = int(self.rng.integers(-180, 180))
            free = self.t.target_free(degree)
            if len(free) == 0:
                return None
            y, x = free[int(self.rng.integers(0, len(free)))]
            first = self._seed_at((int(y), int(x)), degree * np.pi / 180)
            if first is not None:
                break
        if first is None:
            return None
        (ty, tx), sd = first.starts[0], p.seed_distance
        for _ in range(p.paddle_retries + 1):
            angle = int(self.rng.integers(-180, 180)) * np.pi / 180
            phi = int(self.rng.integers(0, 360)) * np.pi / 180
            tail = (int(np.round(ty + sd * np.sin(phi))), int(np.round(tx + sd * np.cos(phi))))
            second = self._seed_at(tail, angle)
            if second is not None:
                return first, second
        return None

    # -- growth ------------------------------------------------------------------------------
    def extend(self, s: Snake) -> bool:
        """Add one paddle to `s` (the original's `extend_snake`); False at a dead end."""
        t, R = self.t, self.t.R
        heading = s.headings[-1]
        py, px = translate(*s.pivot, heading, self.p.paddle_length + 2 * t.m)
        dy, dx, taps = t.ring_dy, t.ring_dx, t.ring_taps
        weights, angles = t.turn_weights(heading), t.ring_angle
        if py not in self.central or px not in self.central:
            keep = np.flatnonzero((py + dy >= 0) & (py + dy < R) & (px + dx >= 0) & (px + dx < R))
            if keep.size == 0:
                return False
            dy, dx, taps, weights, angles = dy[keep], dx[keep], taps[keep], weights[keep], angles[keep]
        # occupancy dilated by the margin disk, at each candidate head
        dilated = self.flat.take(taps + ((py + t.pad) * t.width + px + t.pad)).max(axis=1)
        pmf = (1 - dilated) * weights
        total = pmf.sum()
        if total < MIN_WEIGHT:
            return False
        cmf = np.cumsum(pmf / total)
        for _ in range(self.p.paddle_retries + 1):
            # the first candidate whose cumulative mass exceeds the draw (the first if none does)
            j = int(cmf.searchsorted(self.rng.random(), side="right"))
            j = 0 if j == len(cmf) else j
            head, new_heading = (py + int(dy[j]), px + int(dx[j])), float(angles[j])
            angle = flip(new_heading)
            if self.fits(t.stamp(angle), *head):
                self.occupy(s.starts[-1], s.angles[-1])
                s.add(head, angle, new_heading, (py, px))
                return True
        return False

    def grow_targets(self) -> tuple[Snake, Snake] | None:
        pair = self.seed_targets()
        if pair is None:
            return None
        for _ in range(self.p.contour_length - 1):
            for s in pair:
                if not self.extend(s):
                    return None
        self.occupy(pair[1].starts[-1], pair[1].angles[-1])
        return pair

    def grow_distractor(self) -> Snake | None:
        """One distractor snake; the occupancy is left unchanged when it fails."""
        saved = self.mask.copy()
        s = self.seed_distractor()
        if s is not None:
            for _ in range(self.p.distractor_length - 1):
                if not self.extend(s):
                    s = None
                    break
        if s is None:
            self.mask[...] = saved
            return None
        self.occupy(s.starts[-1], s.angles[-1])
        return s


def place_targets(t: Tables, rng) -> tuple[Field, tuple[Snake, Snake], int]:
    """Grow target pairs on fresh fields until one completes: (field, pair, attempts)."""
    f, attempts = Field(t, rng), 0
    while True:
        attempts += 1
        pair = f.grow_targets()
        if pair is not None:
            return f, pair, attempts
        f.reset()


def place_distractors(f: Field) -> list[Snake]:
    placed = []
    for _ in range(f.p.n_distractors):
        for _attempt in range(f.p.distractor_retries + 1):
            s = f.grow_distractor()
            if s is not None:
                placed.append(s)
                break
    return placed
