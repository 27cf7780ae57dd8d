"""Pathfinder images are pinned to the byte: any change to what (params, seed, index) draws must
bump GENERATOR_VERSION and re-record these digests.

The digests were recorded from the one-image-at-a-time generator (commit 2ea5393, before images
were grown in batches) with `_digest` below: SHA-256 of each uint8 image followed by its label
byte, first 32 hex digits.
"""
import hashlib

import numpy as np
import pytest

from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder import generator as gen

assert pf.GENERATOR_VERSION == 2  # the version these digests belong to

# (resolution, difficulty, seed, images) -> digest of generate_image over indices 0..images-1
PINNED = {
    (32, "hard", 7, 8): "ec3bad3ea52e2bdd45f7a3412f90342f",
    (64, "hard", 7, 4): "c6494464ab14c2d0081ba6d02de97411",
    (128, "hard", 7, 3): "74edf05f3d189eb51e05d843edfde7f5",
    (256, "hard", 7, 2): "9e0b9cf541c07f5792cfba5294c19fbe",
    (64, "easy", 3, 3): "802ce9ab9a66598c19fff7bd2bafc876",
    (128, "intermediate", 3, 3): "3d505625df11798e034d298b4b478b75",
}
# (resolution, images) -> digest of images replayed from RandomState(i), as the original draws
PINNED_LEGACY = {
    (32, 4): "e38b11b5e9e9e62825be2a9586d230b8",
    (128, 1): "b59282123815fb7fe741a32d3c695b8c",
}


def _digest(pairs) -> str:
    h = hashlib.sha256()
    for img, label in pairs:
        h.update(np.ascontiguousarray(img, np.uint8).tobytes())
        h.update(bytes([int(label)]))
    return h.hexdigest()[:32]


@pytest.mark.parametrize("key", list(PINNED), ids=lambda k: f"{k[0]}-{k[1]}")
def test_images_match_the_recorded_bytes(key):
    resolution, difficulty, seed, n = key
    p = pf.pathfinder_params(resolution, difficulty)
    assert _digest(pf.generate_image(p, seed, i) for i in range(n)) == PINNED[key]
    if resolution <= 64:  # and grown together
        assert _digest(pf.generate_images(p, seed, range(n))) == PINNED[key]


@pytest.mark.parametrize("key", list(PINNED_LEGACY), ids=lambda k: str(k[0]))
def test_legacy_stream_replay_matches_the_recorded_bytes(key):
    resolution, n = key
    p = pf.pathfinder_params(resolution)
    samples = [gen.draw_sample(p, gen.LegacyStream(np.random.RandomState(i))) for i in range(n)]
    assert _digest((gen.compose(gen.render_layers(p, s)), s.label) for s in samples) == PINNED_LEGACY[key]


def test_margins_mix():
    """At 128 px each image draws one of two margins."""
    p = pf.pathfinder_params(128)
    samples = [gen.draw_sample(p, np.random.default_rng([7, i])) for i in range(3)]
    assert {s.margin for s in samples} <= set(p.margins)
    got = _digest((gen.compose(gen.render_layers(p, s)), s.label) for s in samples)
    assert got == PINNED[(128, "hard", 7, 3)]


def test_written_shards_match_the_recorded_bytes(tmp_path):
    pf.generate_pathfinder(tmp_path, 64, "hard", 4, seed=7, progress=False)
    imgs, labels = pf.load_pathfinder(tmp_path, resolution=64)
    assert _digest(zip(imgs, labels)) == PINNED[(64, "hard", 7, 4)]
