"""One Pathfinder image: draw the snakes, render them and the markers, rescale to bytes.

Every image is a pure function of (params, seed, index): `numpy.random.default_rng([seed, index])`.
`draw_sample` also takes a `LegacyStream`, so the original generator's own random stream can be
replayed. The snakes grow in compiled code (`snakes.grow_snakes`); the first call in a process
compiles it, or loads it from numba's on-disk cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fa_train.data.lra.pathfinder.params import PathfinderParams
from fa_train.data.lra.pathfinder.render import bytescale, marker_disk, paste_max
from fa_train.data.lra.pathfinder.snakes import Snake, grow_snakes, tables

# bumped whenever the images drawn for a given (params, seed, index) change
GENERATOR_VERSION = 2


@dataclass
class Sample:
    label: int
    margin: int
    targets: tuple[Snake, Snake]
    distractors: list[Snake]
    marker_snakes: tuple[int, int]  # (snake of the first marker, snake of the second)
    pair_attempts: int

    @property
    def markers(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """First marker on the first paddle's tail of one target, the second on the last paddle's
        head of the same target (label 1) or of the other (label 0)."""
        a, b = self.marker_snakes
        return self.targets[a].starts[0], self.targets[b].starts[-1]


class LegacyStream:
    """`integers`/`random` over a `numpy.random.RandomState`, as the original draws them;
    `generator` shares its bit generator (for the compiled draws)."""

    def __init__(self, state: np.random.RandomState):
        self.state = state
        self.generator = np.random.Generator(state._bit_generator)

    def integers(self, low: int, high: int) -> int:
        return int(self.state.randint(low, high))

    def random(self) -> float:
        return float(self.state.random_sample())


def draw_sample(p: PathfinderParams, rng) -> Sample:
    """The snakes, label and markers of one image drawn from `rng` (a numpy Generator or a
    `LegacyStream`)."""
    if isinstance(rng, LegacyStream):
        bits, legacy = rng.generator, True
    elif isinstance(rng, np.random.Generator):
        bits, legacy = rng, False
    else:
        raise TypeError(f"rng must be a numpy Generator or a LegacyStream, got {type(rng).__name__}")
    label = int(rng.integers(0, 2))
    margin = p.margins[int(rng.integers(0, len(p.margins)))] if len(p.margins) > 1 else p.margins[0]
    targets, distractors, attempts = grow_snakes(tables(p, margin), bits, legacy)
    a = int(rng.integers(0, 2))
    return Sample(label, margin, targets, distractors, (a, a if label else 1 - a), attempts)


def _layer(p: PathfinderParams, margin: int, snakes: list[Snake], value: float) -> np.ndarray:
    # float32 like the original's paddle canvases, whose rounding the final bytes inherit
    canvas = np.zeros((p.resolution, p.resolution), np.float32)
    t = tables(p, margin)
    for s in snakes:
        for start, angle in zip(s.starts, s.angles):
            paste_max(canvas, t.stamp(angle).line, *start, scale=value)
    return canvas


def render_layers(p: PathfinderParams, sample: Sample) -> dict[str, np.ndarray]:
    """Float layers before rescaling: each target (2, R, R), the distractors and the markers."""
    tv = p.paddle_contrast * p.snake_contrast
    targets = np.stack([_layer(p, sample.margin, [s], tv) for s in sample.targets])
    distractors = _layer(p, sample.margin, sample.distractors, p.snake_contrast)
    markers = np.maximum(*(marker_disk(p.resolution, c, p.marker_radius, p.antialias)
                           for c in sample.markers))
    return {"targets": targets, "distractors": distractors, "markers": markers}


def compose(layers: dict[str, np.ndarray]) -> np.ndarray:
    """The uint8 image: pixel-wise max of every layer, min-max rescaled to 0..255."""
    strokes = np.maximum(layers["targets"].max(axis=0), layers["distractors"])
    return bytescale(np.maximum(strokes, layers["markers"]))


def generate_image(params: PathfinderParams, seed: int, index: int, return_info: bool = False):
    """Image `index` of the stream `seed`: (uint8 (R, R) image, label) and, with `return_info`,
    a dict with the snakes, markers, float layers and counts (for tests and comparisons)."""
    return generate_images(params, seed, [index], return_info)[0]


def generate_images(params: PathfinderParams, seed: int, indices, return_info: bool = False) -> list[tuple]:
    """`generate_image` for each of `indices`."""
    samples = [draw_sample(params, np.random.default_rng([int(seed), int(i)])) for i in indices]
    out = []
    for sample in samples:
        layers = render_layers(params, sample)
        image = compose(layers)
        out.append((image, sample.label, sample_info(params, sample, layers)) if return_info
                   else (image, sample.label))
    return out


def sample_info(p: PathfinderParams, sample: Sample, layers: dict[str, np.ndarray]) -> dict[str, Any]:
    return {
        "label": sample.label,
        "margin": sample.margin,
        "targets": list(sample.targets),
        "distractors": list(sample.distractors),
        "marker_snakes": sample.marker_snakes,
        "markers": sample.markers,
        "layers": layers,
        "pair_attempts": sample.pair_attempts,
        "num_distractors": p.n_distractors,
        "num_distractors_placed": len(sample.distractors),
    }
