"""The compiled growth loop (`pathfinder.grow`) draws and adds up exactly as NumPy does; the
markers' shortcut rescales as `bytescale` does."""
import hashlib
import random

import numpy as np
import pytest

from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder import generator as gen
from fa_train.data.lra.pathfinder import grow

RANGES = [(-180, 180), (0, 1), (0, 2), (0, 3), (0, 360), (0, 1000), (0, 65_537), (5, 3_000_000_000)]

# digests (as in test_pathfinder_bytes) of images on seeds the pinned ones leave out, recorded from
# the NumPy generator this loop replaced (commit 81555e9)
FRESH = {
    (32, "hard", 11, 32): "5b9daecab121739ca31f4150c391202c",
    (64, "hard", 11, 8): "af2f4988f039d6e94c1ebd5532fed14c",
    (128, "hard", 11, 6): "65ba7a4e93ae79d1beabc2715c5898fc",
    (256, "hard", 11, 4): "e70b4cd8a370bc071ca6c75a0cfc2a6c",
    (32, "easy", 12, 8): "e3bf719a0212236f1e36532304c7f667",
    (256, "intermediate", 12, 2): "ce1b2856d5d4d98fe5fc5b1bac6a7a46",
}
# (resolution, images) -> digest of images replayed from RandomState(100 + i), same origin
FRESH_LEGACY = {
    (64, 3): "546dd51cd19adad5a9c956b03018f6ea",
    (128, 2): "0c923be875823e6f82680863429ec02e",
    (256, 2): "ff39f806cf3324870f5decfd052b23b3",
}


def _digest(pairs) -> str:
    h = hashlib.sha256()
    for img, label in pairs:
        h.update(np.ascontiguousarray(img, np.uint8).tobytes())
        h.update(bytes([int(label)]))
    return h.hexdigest()[:32]


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


@pytest.mark.parametrize("key", list(FRESH), ids=lambda k: f"{k[0]}-{k[1]}")
def test_fresh_seeds_match_the_numpy_generator(key):
    resolution, difficulty, seed, n = key
    p = pf.pathfinder_params(resolution, difficulty)
    assert _digest(pf.generate_images(p, seed, range(n))) == FRESH[key]


@pytest.mark.parametrize("key", list(FRESH_LEGACY), ids=lambda k: str(k[0]))
def test_fresh_legacy_replays_match_the_numpy_generator(key):
    resolution, n = key
    p = pf.pathfinder_params(resolution)
    samples = [gen.draw_sample(p, gen.LegacyStream(np.random.RandomState(100 + i))) for i in range(n)]
    assert _digest((gen.compose(gen.render_layers(p, s)), s.label) for s in samples) == FRESH_LEGACY[key]


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
