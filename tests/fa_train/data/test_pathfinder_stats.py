"""Pathfinder-32 draws what the original generator draws: 200 of our images against the
original's statistics measured by research/pathfinder_generator/compare.py (results.json).

Tolerances come from the measured per-image spread: a mean of 200 images may differ from the
original's by at most 4 combined standard errors, a histogram bin by 4 binomial errors."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder.stats import SCALARS, measure, snake_turns, summarize

RESULTS = Path(__file__).resolve().parents[3] / "research/pathfinder_generator/results.json"
N = 200


@pytest.fixture(scope="module")
def sample():
    p = pf.pathfinder_params(32)
    rows, images, labels, turns = [], [], [], []
    for i in range(N):
        img, label, info = pf.generate_image(p, 2024, i, return_info=True)
        t = snake_turns(list(info["targets"]) + list(info["distractors"]))
        rows.append(measure(img, info["layers"]["targets"], info["layers"]["distractors"],
                            info["markers"], info["num_distractors_placed"], t, p.marker_radius))
        images.append(img)
        labels.append(label)
        turns += t
    return summarize(rows, np.stack(images), np.asarray(turns), np.asarray(labels), p.n_distractors)


@pytest.fixture(scope="module")
def original():
    res = json.loads(RESULTS.read_text())
    assert res["resolution"] == 32 and res["params"] == pf.pathfinder_params(32).to_dict()
    return res["statistics"]["original"]


@pytest.mark.parametrize("key", SCALARS)
def test_per_image_means_match_the_original(sample, original, key):
    ref, ours = original[key], sample[key]
    tol = 4 * math.hypot(ref["std"] / math.sqrt(ours["n"]), ref["se"])
    assert abs(ours["mean"] - ref["mean"]) <= tol, (key, ours["mean"], ref["mean"], tol)


def test_distractor_count_distribution_matches(sample, original):
    for k, (p_ref, p_ours) in enumerate(zip(original["distractors_placed_hist"],
                                            sample["distractors_placed_hist"])):
        tol = 4 * math.sqrt(max(p_ref * (1 - p_ref), 1e-3) / N)
        assert abs(p_ours - p_ref) <= tol, (k, p_ours, p_ref, tol)


def test_markers_are_not_the_only_bright_things(sample, original):
    # the original draws markers at 1.0 under strokes of contrast 1.5 / 2.0: after rescaling the
    # distractor strokes outshine the markers and there are many bright blobs per image
    assert sample["distractor_peak"]["mean"] > sample["marker_centre"]["mean"]
    assert sample["bright_blobs"]["mean"] > 10
    assert sample["touching"]["mean"] > 0  # the targets may touch, as in the original


def test_turn_angles_spread_like_the_original(sample, original):
    ours, ref = sample["turn_deg"], original["turn_deg"]
    assert ours["distinct"] > 20 and ours["max"] <= ref["max"] + 1e-6
    assert abs(ours["median"] - ref["median"]) <= 10
