"""The growth loop of one image, compiled (numba): target pairs with restarts, then distractors.

Works on one occupancy mask (float, flat, zero-padded by `g.pad` on every side) and the tables of
`snakes.Geometry`. A paddle is an angle id: ring candidate `c` (< n_ring: paddle angle and growth
heading of that candidate) or `n_ring + degree + 180` (a seed paddle at that whole degree). Every
floating-point value that needs a transcendental function comes precomputed from the tables, and
sums add up in NumPy's order, so the masks, draws and snakes are bit for bit those of NumPy code.

Draws come from a `numpy.random.Generator` (shared state: draws made here and in Python
interleave); with `legacy`, integers are drawn as `RandomState.randint` draws them (masked
rejection on 32-bit outputs) from the Generator's bit generator.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

ACCEPT_BELOW = 1.8  # max of occupancy + footprint for a paddle to be kept
BUSY_ABOVE = 0.3    # occupancy above which a pixel cannot take a seed
MIN_WEIGHT = 1e-4   # total candidate weight below which a snake is at a dead end


@njit(cache=True)
def draw_int(rng, legacy, low, high):
    """`integers(low, high)` of a Generator, or with `legacy` of a RandomState on its bit generator."""
    if not legacy:
        return rng.integers(low, high)
    span = np.int64(high - 1 - low)
    if span == 0:
        return np.int64(low)
    mask = span
    for s in (1, 2, 4, 8, 16):
        mask |= mask >> s
    while True:
        v = np.int64(rng.integers(0, 0xFFFFFFFF, endpoint=True, dtype=np.uint32)) & mask
        if v <= span:
            return low + v


@njit(cache=True)
def pairwise_sum(a, n):
    """`a[:n].sum()` added up as NumPy's float64 add reduction does (8-way pairwise blocks)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        r = a[:8].copy()
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(a, n2) + pairwise_sum(a[n2:], n - n2)


@njit(cache=True)
def _window(g, y, x):
    h = g.half
    return max(y - h, 0), max(x - h, 0), min(y + h + 1, g.R), min(x + h + 1, g.R)


@njit(cache=True)
def paste(g, occ, log_yx, log_vals, nlog, y, x, pid):
    """Occupy the footprint of paddle `pid` started at (y, x), clipped to the image. The paste is
    logged as entry `nlog` (its start, and the values its window held before, for `undo`).
    Returns the new log length."""
    y0, x0, y1, x1 = _window(g, y, x)
    S, h, W, pad = 2 * g.half + 1, g.half, g.W, g.pad
    log_yx[nlog, 0], log_yx[nlog, 1] = y, x
    k = 0
    for yy in range(y0, y1):
        row = (pad + yy) * W + pad
        srow = (yy - y + h) * S - x + h
        for xx in range(x0, x1):
            old = occ[row + xx]
            log_vals[nlog, k] = old
            k += 1
            v = g.stamps[pid, srow + xx]
            if v > old:
                occ[row + xx] = v
    return nlog + 1


@njit(cache=True)
def undo(g, occ, log_yx, log_vals, nlog, keep):
    """Take back the pastes logged after the first `keep`, newest first. Returns `keep`."""
    W, pad = g.W, g.pad
    for i in range(nlog - 1, keep - 1, -1):
        y0, x0, y1, x1 = _window(g, log_yx[i, 0], log_yx[i, 1])
        k = 0
        for yy in range(y0, y1):
            row = (pad + yy) * W + pad
            for xx in range(x0, x1):
                occ[row + xx] = log_vals[i, k]
                k += 1
    return keep


@njit(cache=True)
def fits(g, occ, py, px, c):
    """Whether ring candidate `c`'s paddle around the pivot (py, px) keeps occupancy plus its
    footprint below ACCEPT_BELOW (on the candidate's core taps, see `snakes.Geometry`)."""
    base = (g.pad + py) * g.W + g.pad + px
    for t in range(g.core_taps.shape[1]):
        if occ[base + g.core_taps[c, t]] + g.core_vals[c, t] >= ACCEPT_BELOW:
            return False
    return True


@njit(cache=True)
def extend(g, occ, rng, legacy, snake, n, pivot, log_yx, log_vals, nlog, scratch):
    """Add paddle `n` to `snake` ((n_max, 3) rows y, x, pid) whose last pivot is `pivot` (the
    original's `extend_snake`); on success the previous paddle is occupied (logged, see
    `paste`). Returns (added, new log length)."""
    pmf, cmf, keep = scratch
    hid = snake[n - 1, 2]
    py = math.ceil(pivot[0] + g.pivot_d[hid, 0])
    px = math.ceil(pivot[1] + g.pivot_d[hid, 1])
    R, W, pad = g.R, g.W, g.pad
    k = 0
    for c in range(len(g.ring)):
        hy, hx = py + g.ring[c, 0], px + g.ring[c, 1]
        if 0 <= hy < R and 0 <= hx < R:
            base = (pad + hy) * W + pad + hx
            d = occ[base + g.disk[0]]
            for t in range(1, len(g.disk)):
                d = max(d, occ[base + g.disk[t]])
            keep[k] = c
            pmf[k] = (1.0 - d) * g.weights[hid, c]
            k += 1
    if k == 0:
        return False, nlog
    total = pairwise_sum(pmf, k)
    if not total >= MIN_WEIGHT:
        return False, nlog
    acc = 0.0
    for j in range(k):
        acc += pmf[j] / total
        cmf[j] = acc
    for _ in range(g.paddle_retries + 1):
        u = rng.random()
        j = 0
        while j < k and cmf[j] <= u:
            j += 1
        c = keep[0 if j == k else j]
        if fits(g, occ, py, px, c):
            nlog = paste(g, occ, log_yx, log_vals, nlog, snake[n - 1, 0], snake[n - 1, 1], snake[n - 1, 2])
            snake[n, 0], snake[n, 1], snake[n, 2] = py + g.ring[c, 0], px + g.ring[c, 1], c
            pivot[0], pivot[1] = py, px
            return True, nlog
    return False, nlog


@njit(cache=True)
def seed_at(g, snake, pivot, y, x, degree):
    """Start `snake` with a seed paddle at (y, x) and `degree` unless its head or pivot leaves
    the image."""
    hy = math.ceil(y + g.seed_d[degree + 180, 0])
    hx = math.ceil(x + g.seed_d[degree + 180, 1])
    py = math.ceil(hy + g.seed_d[degree + 180, 2])
    px = math.ceil(hx + g.seed_d[degree + 180, 3])
    if not (0 <= hy < g.R and 0 <= hx < g.R and 0 <= py < g.R and 0 <= px < g.R):
        return False
    snake[0, 0], snake[0, 1], snake[0, 2] = y, x, len(g.ring) + degree + 180
    pivot[0], pivot[1] = py, px
    return True


@njit(cache=True)
def seed_targets(g, rng, legacy, snakes, pivots):
    """First paddles of the two targets (the original's `initialize_two_seeds`)."""
    found = False
    for _ in range(g.paddle_retries + 1):
        degree = draw_int(rng, legacy, -180, 180)
        lo, hi = g.free_start[degree + 180], g.free_start[degree + 181]
        if lo == hi:
            return False
        k = g.free[lo + draw_int(rng, legacy, 0, hi - lo)]
        if seed_at(g, snakes[0], pivots[0], k // g.R, k % g.R, degree):
            found = True
            break
    if not found:
        return False
    ty, tx = snakes[0, 0, 0], snakes[0, 0, 1]
    for _ in range(g.paddle_retries + 1):
        degree = draw_int(rng, legacy, -180, 180)
        phi = draw_int(rng, legacy, 0, 360)
        y, x = np.rint(ty + g.second_d[phi, 0]), np.rint(tx + g.second_d[phi, 1])
        if seed_at(g, snakes[1], pivots[1], int(y), int(x), degree):
            return True
    return False


@njit(cache=True)
def seed_distractor(g, occ, rng, legacy, snake, pivot, lined, hit):
    """First paddle of a distractor (the original's `seed_snake`): a seed pixel drawn among those
    whose seed footprint avoids occupancy above BUSY_ABOVE and the image's edge. `lined` holds
    per row the running count of such pixels, `hit` the refused pixels."""
    R, W, pad = g.R, g.W, g.pad
    free = 0
    for y in range(R):
        for x in range(R):
            busy = occ[(pad + y) * W + pad + x] > BUSY_ABOVE
            free += not busy
            edge = busy or y == 0 or y == R - 1 or x == 0 or x == R - 1
            lined[y, x + 1] = lined[y, x] + edge
    scarce = free / (R * R) < g.stop_free_fraction
    for _ in range(g.paddle_retries + 1):
        degree = draw_int(rng, legacy, -180, 180)
        if scarce or not g.covered[degree + 180]:
            return False
        hit[:, :] = 0
        # a pixel is refused when a run (dy, dx from a to b) of its footprint meets a lined pixel
        for t in range(g.foot_start[degree + 180], g.foot_start[degree + 181]):
            dy, a, b = g.foot[t, 0], g.foot[t, 1], g.foot[t, 2]
            # x in [c0, c1) sees the run's pixels, clipped to the row outside [i0, i1)
            c0, c1 = max(0, -b), min(R, R - a)
            i0 = min(max(-a, c0), c1)
            i1 = max(min(R - b, c1), i0)
            for y in range(max(0, -dy), min(R, R - dy)):
                h, counts = hit[y], lined[y + dy]
                dst, upto, before = h[i0:i1], counts[i0 + b + 1:i1 + b + 1], counts[i0 + a:i1 + a]
                for z in range(i1 - i0):
                    dst[z] |= upto[z] > before[z]
                for x in range(c0, i0):
                    h[x] |= counts[min(x + b, R - 1) + 1] > counts[max(x + a, 0)]
                for x in range(i1, c1):
                    h[x] |= counts[min(x + b, R - 1) + 1] > counts[max(x + a, 0)]
        n = R * R - np.count_nonzero(hit)
        if n == 0:
            return False
        k = draw_int(rng, legacy, 0, n)
        flat = hit.reshape(-1)
        i = -1
        while k >= 0:
            i += 1
            if flat[i] == 0:
                k -= 1
        if seed_at(g, snake, pivot, i // R, i % R, degree):
            return True
    return False


@njit(cache=True)
def grow_image(g, rng, legacy, occ, targets, distractors):
    """Grow one image's snakes on `occ` (left as the final occupancy): target pairs until one
    completes, then the distractors. `targets` (2, contour_length, 3) and `distractors`
    (n_distractors, distractor_length, 3) receive rows (y, x, pid). Returns (pair attempts,
    distractors placed)."""
    n_log = max(2 * targets.shape[1], distractors.shape[1]) + 1
    log_yx, log_vals = np.zeros((n_log, 2), np.int64), np.zeros((n_log, (2 * g.half + 1) ** 2))
    n_ring = len(g.ring)
    scratch = (np.zeros(n_ring), np.zeros(n_ring), np.zeros(n_ring, np.int64))
    pivots = np.zeros((2, 2), np.int64)
    occ[:] = g.blank
    attempts, nlog = 0, 0
    while True:  # a failed pair is taken back and grown anew
        attempts += 1
        nlog = undo(g, occ, log_yx, log_vals, nlog, 0)
        ok = seed_targets(g, rng, legacy, targets, pivots)
        n = 1
        while ok and n < targets.shape[1]:
            for s in range(2):
                ok, nlog = extend(g, occ, rng, legacy, targets[s], n, pivots[s], log_yx, log_vals, nlog,
                                  scratch)
                if not ok:
                    break
            n += 1
        if ok:
            break
    last = targets[1, -1]
    paste(g, occ, log_yx, log_vals, 0, last[0], last[1], last[2])
    lined, hit = np.zeros((g.R, g.R + 1), np.int32), np.zeros((g.R, g.R), np.uint8)
    placed = 0
    for _ in range(distractors.shape[0]):
        for _attempt in range(g.distractor_retries + 1):
            s = distractors[placed]
            ok, nlog = seed_distractor(g, occ, rng, legacy, s, pivots[0], lined, hit), 0
            n = 1
            while ok and n < len(s):
                ok, nlog = extend(g, occ, rng, legacy, s, n, pivots[0], log_yx, log_vals, nlog, scratch)
                n += 1
            if ok:
                paste(g, occ, log_yx, log_vals, 0, s[-1, 0], s[-1, 1], s[-1, 2])
                placed += 1
                break
            undo(g, occ, log_yx, log_vals, nlog, 0)  # a failed distractor leaves no trace
    return attempts, placed
