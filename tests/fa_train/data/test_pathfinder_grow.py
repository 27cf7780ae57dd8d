"""The compiled growth loop (`pathfinder.grow`) draws and adds up exactly as NumPy does (its images'
bytes: test_pathfinder_bytes); the markers' shortcut rescales as `bytescale` does."""
import random

import numpy as np
import pytest

from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder import generator as gen
from fa_train.data.lra.pathfinder import grow

RANGES = [(-180, 180), (0, 1), (0, 2), (0, 3), (0, 360), (0, 1000), (0, 65_537), (5, 3_000_000_000)]


@pytest.mark.parametrize("legacy", [False, True])
def test_draw_int_draws_what_numpy_draws(legacy):
    """Compiled integers equal Generator.integers (RandomState.randint with `legacy`) and share the
    stream's state with draws made in Python; a range of one value draws nothing."""
    if legacy:
        ref, state = np.random.RandomState(3), np.random.RandomState(3)
        bits = gen.LegacyStream(state).generator
        pairs = [(ref.randint, state.randint), (ref.random_sample, state.random_sample)]
    else:
        ref, bits = np.random.default_rng(3), np.random.default_rng(3)
        pairs = [(ref.integers, bits.integers), (ref.random, bits.random)]
    for i in range(400):
        low, high = RANGES[i % len(RANGES)]
        assert grow.draw_int(bits, legacy, low, high) == pairs[0][0](low, high)
        if i % 3 == 0:
            assert pairs[0][1](0, 7) == pairs[0][0](0, 7)
            assert pairs[1][1]() == pairs[1][0]()


def test_pairwise_sum_adds_up_as_numpy():
    rng = np.random.default_rng(0)
    for n in range(0, 300):
        a = rng.random(n) ** 8 * 10.0 ** rng.integers(-6, 6, n)
        assert grow.pairwise_sum(a, n) == a.sum()
        assert grow.pairwise_sum(np.append(a, 1e9), n) == a.sum()  # only the first n count


def test_draw_sample_takes_only_numpy_or_legacy_streams():
    with pytest.raises(TypeError, match="^rng must be a numpy Generator or a LegacyStream, got Random$"):
        gen.draw_sample(pf.pathfinder_params(32), random.Random(0))


def test_marker_disk_rescales_as_bytescale_does():
    """The marker's 0/1 disk becomes bytes as `bytescale` makes them, a disk covering the whole
    image included (a constant image rescales to 0)."""
    from fa_train.data.lra.pathfinder import render

    def reference(resolution, centre, radius):
        yy = np.arange(2 * resolution)[:, None] - 2 * centre[0]
        xx = np.arange(2 * resolution)[None, :] - 2 * centre[1]
        disk = (xx * xx + yy * yy <= (2 * radius) ** 2).astype(np.float64)
        return render.lanczos(render.bytescale(disk), resolution).astype(np.float64) / 255

    for resolution, centre, radius in [(32, (0, 31), 1.5), (64, (20, 40), 2.5), (8, (4, 4), 40.0),
                                       (16, (-9, 3), 2.0)]:
        got = render.marker_disk(resolution, centre, radius, 2)
        assert np.array_equal(got, reference(resolution, centre, radius))
    assert not render.marker_disk(8, (4, 4), 40.0, 2).any()
