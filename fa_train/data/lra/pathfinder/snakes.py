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

Many images grow side by side, each on its own slot of a shared mask stack (`Stacks`): the
growth methods are generators that yield GROW / FITS requests, and `answer` serves the pending
requests of every image at once (ranking the candidates, drawing, testing the fit and adding the
paddle in a few array operations per batch). Each image still makes exactly its own draws in its
own order, so a batch draws bit for bit what each image draws alone.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from fa_train.data.lra.pathfinder.params import PathfinderParams
from fa_train.data.lra.pathfinder.render import Stamp, dilate_binary, disk_offsets, paddle_stamp, paste_max

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


class RowTable:
    """Rows of one width computed once per key and kept in one growing 2-D array (`rows`), so that
    a batch of keys becomes one fancy index."""

    def __init__(self, width: int, compute):
        self.rows = np.zeros((16, width))
        self.index: dict[float, int] = {}
        self.compute = compute

    def row(self, key: float) -> int:
        i = self.index.get(key)
        if i is None:
            i = len(self.index)
            if i == len(self.rows):
                self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self.rows[i] = self.compute(key)
            self.index[key] = i
        return i


class Tables:
    """Everything that depends only on (params, margin): candidate ring, dilation disk, stamps,
    seed footprints and the target seeds' free pixels per angle, and the batched answers to the
    fields' growth requests."""

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
        # per candidate, as Python numbers: (dy, dx), growth heading, paddle angle
        self.ring_steps = list(zip(self.ring_dy.tolist(), self.ring_dx.tolist()))
        self.ring_heading = self.ring_angle.tolist()
        self.ring_flip = [flip(a) for a in self.ring_heading]
        self.ring_flat = self.ring_dy * self.width + self.ring_dx
        disk = disk_offsets(margin)
        # flat offsets (in the padded mask) of the disk taps (rows) around every candidate head
        self.disk_ring_taps = (disk[:, 0, None] + self.ring_dy) * self.width + disk[:, 1, None] + self.ring_dx
        self.half = L + int(math.ceil(p.paddle_thickness)) + margin  # every stamp's half size
        span = np.arange(-self.half, self.half + 1)
        self.stamp_taps = (span[:, None] * self.width + span[None, :]).reshape(-1)
        self._stamps: dict[float, Stamp] = {}
        self.weights = RowTable(len(self.ring_steps), self.turn_weights)
        self.stamp_masks = RowTable(len(self.stamp_taps), lambda a: self.stamp(a).mask.reshape(-1))
        # a pixel can refuse a candidate's paddle only where even full occupancy (1.0) plus the
        # footprint reaches ACCEPT_BELOW: those "core" taps per candidate, from its pivot, padded
        # with the head pixel and a footprint of 0
        masks = [self.stamp(a).mask.reshape(-1) for a in self.ring_flip]
        cores = [np.flatnonzero(1.0 + m >= ACCEPT_BELOW) for m in masks]
        self.core_taps = np.repeat(self.ring_flat[:, None], max(1, *map(len, cores)), axis=1)
        self.core_vals = np.zeros(self.core_taps.shape)
        for c, (core, m) in enumerate(zip(cores, masks)):
            self.core_taps[c, :len(core)] += self.stamp_taps[core]
            self.core_vals[c, :len(core)] = m[core]
        self._steps: dict[tuple[float, float], tuple[float, float]] = {}
        self._second: dict[int, tuple[float, float]] = {}
        self._footprints: dict[float, tuple[np.ndarray, bool]] = {}
        self._target_free: dict[int, np.ndarray] = {}
        base = np.zeros((self.R, self.R))
        pd = p.padding
        base[:pd, :], base[-pd:, :], base[:, :pd], base[:, -pd:] = 1, 1, 1, 1
        self.blank = np.zeros((self.width, self.width))
        self.blank[self.pad:self.pad + self.R, self.pad:self.pad + self.R] = base
        band = base.copy()
        sd2 = 2 * p.seed_distance
        band[:sd2, :], band[self.R - sd2:, :], band[:, :sd2], band[:, self.R - sd2:] = 1, 1, 1, 1
        self.target_busy = band > BUSY_ABOVE

    def stamp(self, angle: float) -> Stamp:
        st = self._stamps.get(angle)
        if st is None:
            p = self.p
            st = self._stamps[angle] = paddle_stamp(angle, p.paddle_length, p.paddle_thickness, self.m,
                                                    p.antialias)
        return st

    def step(self, y: int, x: int, angle: float, dist: float) -> tuple[int, int]:
        """`translate(y, x, angle, dist)` with the direction's sine and cosine kept."""
        d = self._steps.get((angle, dist))
        if d is None:
            d = self._steps[(angle, dist)] = (float(dist) * math.sin(angle), float(dist) * math.cos(angle))
        return math.ceil(y + d[0]), math.ceil(x + d[1])

    def second_offset(self, degree: int) -> tuple[float, float]:
        """(dy, dx) from the first target's seed to the second's, before rounding."""
        d = self._second.get(degree)
        if d is None:
            phi, sd = degree * np.pi / 180, self.p.seed_distance
            d = self._second[degree] = (sd * np.sin(phi), sd * np.cos(phi))
        return d

    def turn_weights(self, heading: float) -> np.ndarray:
        d = np.abs(self.ring_angle - heading)
        d = np.minimum(np.minimum(d, 2 * np.pi - d) * self.p.continuity, 0.5 * np.pi)
        return np.maximum(np.cos(d), 0) ** 2

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

    # -- batched answers -----------------------------------------------------------------------
    def grow(self, requests: list[tuple]) -> list:
        """Answer GROW requests (kind, field, snake, py, px), each one extension of `snake` from
        the pivot (py, px): rank the candidates, draw one, test it and, when it fits, add it (and
        the previous paddle's footprint). Answers: True (added), False (dead end) or, when the
        first draw did not fit, (cumulative mass, candidate ring indices or None for all) for the
        remaining draws."""
        n, W, R = len(requests), self.width, self.R
        out: list = [False] * n
        pivots = np.array([f.origin + py * W + px for _, f, _, py, px in requests])
        heads_y = np.array([r[3] for r in requests])[:, None] + self.ring_dy
        heads_x = np.array([r[4] for r in requests])[:, None] + self.ring_dx
        inside = (heads_y >= 0) & (heads_y < R) & (heads_x >= 0) & (heads_x < R)
        counts = inside.sum(axis=1)
        rows = np.array([self.weights.row(r[2].headings[-1]) for r in requests])
        stack = requests[0][1].stack
        alive, picks, cmfs = [], [], {}
        # only candidates inside the image count; requests with as many of them share one array
        # (a row's sum then adds up exactly as the sum of that row alone)
        for k in np.unique(counts).tolist():
            if k == 0:
                continue
            which = np.flatnonzero(counts == k)
            if k == len(self.ring_steps):
                keep = None
                taps, weights = self.disk_ring_taps[:, None, :], self.weights.rows[rows[which]]
            else:
                keep = np.nonzero(inside[which])[1].reshape(-1, k)  # candidates of each, in order
                taps, weights = self.disk_ring_taps[:, keep], self.weights.rows[rows[which, None], keep]
            # occupancy dilated by the margin disk at every candidate head, weighted by turn
            dilated = stack.take(pivots[which, None] + taps).max(axis=0)
            pmf = (1 - dilated) * weights
            total = pmf.sum(axis=1)
            live = total >= MIN_WEIGHT
            cmf = np.cumsum(pmf / np.where(live, total, 1.0)[:, None], axis=1)  # dead ends: unused
            # the first candidate whose cumulative mass exceeds the draw (the first if none does)
            which, live = which.tolist(), live.tolist()
            draws = np.array([requests[i][1].rng.random() if ok else 2.0 for i, ok in zip(which, live)])
            j = (cmf <= draws[:, None]).sum(axis=1)
            j[j == k] = 0
            chosen = j if keep is None else keep[np.arange(len(j)), j]
            for row, (i, ok, c) in enumerate(zip(which, live, chosen.tolist())):
                if ok:
                    cmfs[i] = (cmf[row], None if keep is None else keep[row].tolist())
                    alive.append(i)
                    picks.append(c)
        if not alive:
            return out
        ok = self._fit(stack, pivots[alive], np.array(picks))
        grown = []
        for i, c, fits in zip(alive, picks, ok.tolist()):
            if fits:
                _, f, s, y, x = requests[i]
                grown.append((f, s.starts[-1], s.angles[-1]))
                f.add_paddle(s, c, y, x)
                out[i] = True
            else:
                out[i] = cmfs[i]
        self.occupy_all(grown)
        return out

    def pick(self, rng, cmf: np.ndarray, keep: list[int] | None) -> int:
        """The ring index of a drawn candidate: the first whose cumulative mass exceeds the draw
        (the first if none does)."""
        j = int(cmf.searchsorted(rng.random(), side="right"))
        j = 0 if j == len(cmf) else j
        return j if keep is None else keep[j]

    def head(self, py: int, px: int, c: int) -> tuple[int, int]:
        """Candidate `c`'s head around the pivot (py, px)."""
        dy, dx = self.ring_steps[c]
        return py + dy, px + dx

    def fits(self, requests: list[tuple]) -> list[bool]:
        """For each FITS request (kind, field, candidate, py, px): whether the occupancy plus the
        footprint of ring candidate's paddle around the pivot (py, px) stays below ACCEPT_BELOW."""
        W = self.width
        pivots = np.array([f.origin + py * W + px for _, f, _, py, px in requests])
        return self._fit(requests[0][1].stack, pivots, np.array([r[2] for r in requests])).tolist()

    def _fit(self, stack: np.ndarray, pivots: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        taps = pivots[:, None] + self.core_taps[candidates]
        return (stack.take(taps) + self.core_vals[candidates]).max(axis=1) < ACCEPT_BELOW

    def occupy_all(self, paddles: list[tuple]) -> None:
        """`field.occupy(start, angle)` for every (field, start, angle), at most one per field;
        the paddles whose footprint lies inside the image at once."""
        lo, hi, W = self.half, self.R - self.half, self.width
        whole = []
        for f, (y, x), angle in paddles:
            if lo <= y < hi and lo <= x < hi:
                whole.append((f, y, x, angle))
            else:
                f.occupy((y, x), angle)
        if whole:
            rows = [self.stamp_masks.row(a) for *_, a in whole]
            idx = np.array([f.origin + y * W + x for f, y, x, _ in whole])[:, None] + self.stamp_taps
            stack = whole[0][0].stack
            stack[idx] = np.maximum(stack[idx], self.stamp_masks.rows[rows])
            for f, *_ in whole:
                f.dirty = True


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


# what a growing field asks for (`yield`), answered for many fields at once by `answer`
GROW = "grow"  # (GROW, field, snake, pivot y, pivot x): see Tables.grow
FITS = "fits"  # (FITS, field, candidate, pivot y, pivot x): whether it fits, see Tables.fits


def answer(requests: list[tuple]) -> list:
    """Answers to the requests of many fields, in order; fields of one Tables share a stack."""
    out: list = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault((r[0], r[1].t), []).append(i)
    for (kind, t), idx in groups.items():
        replies = (t.grow if kind == GROW else t.fits)([requests[i] for i in idx])
        for i, reply in zip(idx, replies):
            out[i] = reply
    return out


class Stacks:
    """The occupancy masks of `n` images grown together: per Tables, one zero-padded
    (n, width, width) array whose row `slot` is one image's mask."""

    def __init__(self, n: int):
        self.n = n
        self.flat: dict[Tables, np.ndarray] = {}

    def mask(self, t: Tables, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(the slot's (width, width) mask, the whole stack flattened)."""
        flat = self.flat.get(t)
        if flat is None:
            flat = self.flat[t] = np.zeros(self.n * t.width * t.width)
        return flat.reshape(self.n, t.width, t.width)[slot], flat


class Field:
    """The occupancy mask (float, padded with zeros) and the snakes grown on it. The methods that
    grow snakes are generators: they yield GROW / FITS requests and receive the answers."""

    def __init__(self, t: Tables, rng, stacks: Stacks, slot: int):
        self.t, self.p, self.rng = t, t.p, rng
        self.mask, self.stack = stacks.mask(t, slot)
        self.mask[...] = t.blank
        self.inner = self.mask[t.pad:t.pad + t.R, t.pad:t.pad + t.R]
        self.origin = (slot * t.width + t.pad) * t.width + t.pad  # pixel (0, 0) in `stack`
        self.dirty = False  # whether anything was added since the last reset

    def reset(self) -> None:
        if self.dirty:
            self.mask[...] = self.t.blank
            self.dirty = False

    # -- occupancy ---------------------------------------------------------------------------
    def occupy(self, start: tuple[int, int], angle: float) -> None:
        paste_max(self.inner, self.t.stamp(angle).mask, *start)
        self.dirty = True

    def add_paddle(self, s: Snake, c: int, py: int, px: int) -> None:
        """Append ring candidate `c` around the pivot (py, px) to `s` (the caller occupies the
        previous paddle's footprint)."""
        t = self.t
        s.add(t.head(py, px, c), t.ring_flip[c], t.ring_heading[c], (py, px))

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
        L, t = self.p.paddle_length, self.t
        head = t.step(*tail, angle, L)
        pivot = t.step(*head, reverse(angle), L + t.m)
        if not self.in_image(head, pivot):
            return None
        s = Snake()
        s.add(tail, angle, angle, pivot)
        return s

    def seed_targets(self) -> tuple[Snake, Snake] | None:
        """First paddles of the two targets (the original's `initialize_two_seeds`), or None."""
        p, rng = self.p, self.rng
        first = None
        for _ in range(p.paddle_retries + 1):
            degree = int(rng.integers(-180, 180))
            free = self.t.target_free(degree)
            if len(free) == 0:
                return None
            y, x = free[int(rng.integers(0, len(free)))]
            first = self._seed_at((int(y), int(x)), degree * np.pi / 180)
            if first is not None:
                break
        if first is None:
            return None
        ty, tx = first.starts[0]
        for _ in range(p.paddle_retries + 1):
            angle = int(rng.integers(-180, 180)) * np.pi / 180
            dy, dx = self.t.second_offset(int(rng.integers(0, 360)))
            second = self._seed_at((round(float(ty + dy)), round(float(tx + dx))), angle)
            if second is not None:
                return first, second
        return None

    # -- growth ------------------------------------------------------------------------------
    def extend(self, s: Snake):
        """Add one paddle to `s` (the original's `extend_snake`); returns False at a dead end."""
        t = self.t
        py, px = t.step(*s.pivot, s.headings[-1], self.p.paddle_length + 2 * t.m)
        reply = yield (GROW, self, s, py, px)
        if not isinstance(reply, tuple):
            return reply
        for _ in range(self.p.paddle_retries):  # the draws after the first
            c = t.pick(self.rng, *reply)
            if (yield (FITS, self, c, py, px)):
                self.occupy(s.starts[-1], s.angles[-1])
                self.add_paddle(s, c, py, px)
                return True
        return False

    def grow_targets(self):
        pair = self.seed_targets()
        if pair is None:
            return None
        for _ in range(self.p.contour_length - 1):
            for s in pair:
                if not (yield from self.extend(s)):
                    return None
        self.occupy(pair[1].starts[-1], pair[1].angles[-1])
        return pair

    def grow_distractor(self):
        """One distractor snake; the occupancy is left unchanged when it fails."""
        saved = self.mask.copy()
        s = self.seed_distractor()
        if s is not None:
            for _ in range(self.p.distractor_length - 1):
                if not (yield from self.extend(s)):
                    s = None
                    break
        if s is None:
            self.mask[...] = saved
            return None
        self.occupy(s.starts[-1], s.angles[-1])
        return s


def place_targets(t: Tables, rng, stacks: Stacks, slot: int):
    """Grow target pairs on fresh fields until one completes: (field, pair, attempts)."""
    f, attempts = Field(t, rng, stacks, slot), 0
    while True:
        attempts += 1
        pair = yield from f.grow_targets()
        if pair is not None:
            return f, pair, attempts
        f.reset()


def place_distractors(f: Field):
    placed = []
    for _ in range(f.p.n_distractors):
        for _attempt in range(f.p.distractor_retries + 1):
            s = yield from f.grow_distractor()
            if s is not None:
                placed.append(s)
                break
    return placed
