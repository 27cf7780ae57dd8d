"""Pathfinder generator parameters: one preset per resolution (LRA's "hard" level by default)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fa_train.errors import UserError

DIFFICULTIES = {"easy": 6, "intermediate": 9, "hard": 14}
RESOLUTIONS = (32, 64, 128, 256)


@dataclass(frozen=True)
class PathfinderParams:
    """Everything that shapes an image. Lengths and radii are in pixels of the final image;
    `antialias` is the supersampling factor paddles and markers are drawn at."""

    resolution: int
    padding: int
    seed_distance: int
    paddle_length: int
    paddle_thickness: float
    margins: tuple[int, ...]
    marker_radius: float
    continuity: float
    snake_contrast: float
    paddle_contrast: float
    distractor_constant: int
    contour_length: int = 14
    num_distractors: int | None = None  # None: distractor_constant // distractor_length
    antialias: int = 2
    paddle_retries: int = 2       # extra draws of a rejected paddle (3 tries in all)
    distractor_retries: int = 4   # extra attempts at a failed distractor snake (5 in all)
    stop_free_fraction: float = 0.01  # no distractor is seeded once fewer pixels are free

    @property
    def distractor_length(self) -> int:
        return max(1, self.contour_length // 3)

    @property
    def n_distractors(self) -> int:
        if self.num_distractors is not None:
            return int(self.num_distractors)
        return self.distractor_constant // self.distractor_length

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["margins"] = list(self.margins)
        d["distractor_length"] = self.distractor_length
        d["num_distractors"] = self.n_distractors
        return d


PRESETS: dict[int, PathfinderParams] = {
    32: PathfinderParams(32, 1, 7, 2, 0.5, (1,), 1.5, 1.0, 2.0, 0.75, 20),
    64: PathfinderParams(64, 1, 12, 5, 1.0, (1,), 2.5, 1.8, 0.8, 1.0, 22),
    128: PathfinderParams(128, 1, 20, 5, 1.5, (2, 3), 3.0, 1.8, 0.9, 1.0, 35),
    256: PathfinderParams(256, 22, 27, 5, 2.0, (3,), 5.0, 1.8, 1.0, 1.0, 30),
}


def pathfinder_params(resolution: int, difficulty: str = "hard",
                      num_distractors: int | None = None) -> PathfinderParams:
    """The parameter set for `resolution` (32, 64, 128, 256) and `difficulty`
    (easy, intermediate, hard = contour length 6, 9, 14)."""
    if resolution not in PRESETS:
        raise UserError(f"resolution {resolution} is not supported; use one of {list(PRESETS)}")
    if difficulty not in DIFFICULTIES:
        raise UserError(f"difficulty {difficulty!r} is not supported; use one of {list(DIFFICULTIES)}")
    if num_distractors is not None and num_distractors < 0:
        raise UserError(f"num_distractors must be >= 0, got {num_distractors}")
    return dataclasses.replace(PRESETS[resolution], contour_length=DIFFICULTIES[difficulty],
                               num_distractors=num_distractors)

