"""Pathfinder generator: parameters, invariants, determinism, formats, loader, CLI."""
import argparse
import math

import numpy as np
import pytest

from fa_train.data.lra import pathfinder as pf


def test_params_follow_the_spec_table():
    p = pf.pathfinder_params(128, "hard")
    assert (p.padding, p.seed_distance, p.paddle_length, p.paddle_thickness) == (1, 20, 5, 1.5)
    assert p.margins == (2, 3) and p.marker_radius == 3 and p.continuity == 1.8
    assert p.contour_length == 14 and p.distractor_length == 4 and p.n_distractors == 35 // 4
    assert pf.pathfinder_params(256).padding == 22 and pf.pathfinder_params(256).n_distractors == 7
    assert pf.pathfinder_params(32, "easy").contour_length == 6
    assert pf.pathfinder_params(64, "intermediate").contour_length == 9
    assert pf.pathfinder_params(128, num_distractors=17).to_dict()["num_distractors"] == 17
    with pytest.raises(ValueError, match="resolution 48"):
        pf.pathfinder_params(48)
    with pytest.raises(ValueError, match="difficulty"):
        pf.pathfinder_params(32, "extreme")


def _components(mask):
    """4-connected component labels of a boolean mask (small images; no scipy needed)."""
    lab = np.zeros(mask.shape, np.int32)
    cur = 0
    for y0, x0 in zip(*np.nonzero(mask)):
        if lab[y0, x0]:
            continue
        cur += 1
        stack = [(y0, x0)]
        lab[y0, x0] = cur
        while stack:
            y, x = stack.pop()
            for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                v, u = y + dy, x + dx
                if 0 <= v < mask.shape[0] and 0 <= u < mask.shape[1] and mask[v, u] and not lab[v, u]:
                    lab[v, u] = cur
                    stack.append((v, u))
    return lab


def _dilate(mask, r):
    out = mask.copy()
    R = mask.shape[0]
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            if dy * dy + dx * dx <= r * r:
                sh = np.zeros_like(mask)
                sh[max(dy, 0):R + min(dy, 0), max(dx, 0):R + min(dx, 0)] = \
                    mask[max(-dy, 0):R + min(-dy, 0), max(-dx, 0):R + min(-dx, 0)]
                out |= sh
    return out


def test_invariants_over_200_images_at_32px():
    p = pf.pathfinder_params(32)
    labels = []
    max_turn = math.pi / (2 * p.continuity) + 1e-9
    for i in range(200):
        img, label, info = pf.generate_image(p, 123, i, return_info=True)
        labels.append(label)
        assert img.dtype == np.uint8 and img.shape == (32, 32)
        assert img.min() == 0 and img.max() == 255
        t = info["targets"]
        assert [len(s) for s in t] == [p.contour_length] * 2
        # markers: tail of the first paddle of target a, head of the last paddle of target b
        a, b = info["marker_snakes"]
        m1, m2 = info["markers"]
        assert np.allclose(m1, t[a][0][:2]) and np.allclose(m2, t[b][-1][2:4])
        assert label == int(a == b)
        for mx, my in (m1, m2):  # both markers are drawn (brightest value)
            assert img[int(round(my)), int(round(mx))] >= 200
        for s in t:  # turns bounded by the continuity, paddles of length L inside the field
            turns = np.diff(s[:, 4])
            turns = (turns + np.pi) % (2 * np.pi) - np.pi
            assert np.all(np.abs(turns) <= max_turn)
            assert np.allclose(np.hypot(s[:, 2] - s[:, 0], s[:, 3] - s[:, 1]), p.paddle_length)
            assert s[:, :4].min() >= p.padding - 0.5 and s[:, :4].max() <= 31 - p.padding + 0.5
        assert info["num_distractors"] == p.n_distractors
        assert 0 <= info["num_distractors_placed"] <= p.n_distractors
    frac = np.mean(labels)
    assert 0.38 <= frac <= 0.62, frac


@pytest.mark.parametrize("resolution,count", [(32, 12), (64, 4)])
def test_rendered_target_strokes_connect_their_own_markers_only(resolution, count):
    p = pf.pathfinder_params(resolution)
    for i in range(count):
        img, label, info = pf.generate_image(p, 7, i, return_info=True)
        renders = [pf.render_paddles(s, resolution, p.paddle_thickness) for s in info["targets"]]
        masks = [r > 0.3 * r.max() for r in renders]  # stroke pixels (not the blur tail)
        assert not (masks[0] & masks[1]).any()  # the two target snakes never touch
        gap = int(math.ceil(max(info["margin"] * 2, 1))) // 2 + 1
        for s, m in zip(info["targets"], masks):
            lab = _components(_dilate(m, gap))
            (x0, y0), (x1, y1) = np.rint(s[0][:2]).astype(int), np.rint(s[-1][2:4]).astype(int)
            assert lab[y0, x0] and lab[y0, x0] == lab[y1, x1]
        # the marker endpoints: same rendered snake iff label 1
        a, b = info["marker_snakes"]
        (mx, my) = np.rint(info["markers"][1]).astype(int)
        assert _dilate(masks[b], 1)[my, mx]  # marker 2 sits on snake b's rendered stroke
        assert (a == b) == bool(label)
        if not label:
            assert not masks[a][my, mx]  # ... and not on snake a's


def test_determinism_per_index():
    p = pf.pathfinder_params(64)
    a, la = pf.generate_image(p, 5, 17)
    b, lb = pf.generate_image(p, 5, 17)
    c, _ = pf.generate_image(p, 5, 18)
    d, _ = pf.generate_image(p, 6, 17)
    assert np.array_equal(a, b) and la == lb
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


@pytest.mark.parametrize("resolution", [128, 256])
def test_large_resolutions_generate(resolution):
    img, label, info = pf.generate_image(pf.pathfinder_params(resolution), 0, 0, return_info=True)
    assert img.shape == (resolution, resolution) and img.max() == 255 and img.min() == 0
    assert info["num_distractors_placed"] > 0


def test_npy_and_png_round_trip_through_loader(tmp_path):
    n = 10
    ref = [pf.generate_image(pf.pathfinder_params(32), 3, i) for i in range(n)]
    s_npy = pf.generate_pathfinder(tmp_path / "npy", 32, "hard", n, seed=3, fmt="npy",
                                   shard_size=4, progress=False)
    s_png = pf.generate_pathfinder(tmp_path / "png", 32, "hard", n, seed=3, fmt="png",
                                   per_dir=4, workers=2, progress=False)
    assert sorted(p.name for p in (tmp_path / "npy/pathfinder32/curv_contour_length_14/shards").iterdir()) \
        == [f"{k}_{i:05d}.npy" for k in ("images", "labels") for i in range(3)]
    level = tmp_path / "png/pathfinder32/curv_contour_length_14"
    assert (level / "imgs/2/sample_1.png").is_file()
    lines = (level / "metadata/1.npy").read_text().splitlines()
    assert lines[0].split()[:4] == ["imgs/1", "sample_0.png", "0", str(ref[4][1])]
    for root in (tmp_path / "npy", tmp_path / "png", level):
        imgs, labels = pf.load_pathfinder(root, resolution=32)
        assert imgs.dtype == np.uint8 and imgs.shape == (n, 32, 32)
        assert np.array_equal(imgs, np.stack([r[0] for r in ref]))
        assert labels.tolist() == [r[1] for r in ref]
    assert s_npy["positives"] == s_png["positives"] == sum(r[1] for r in ref)
    assert s_png["params"]["num_distractors"] == 5


def test_loader_errors_name_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="curv_contour_length"):
        pf.PathfinderImages(tmp_path, resolution=32)


def test_split_is_deterministic_80_10_10():
    s1, s2 = pf.split_indices(1000, 0), pf.split_indices(1000, 0)
    assert [len(s1[k]) for k in ("train", "val", "test")] == [800, 100, 100]
    assert all(np.array_equal(s1[k], s2[k]) for k in s1)
    assert len(np.unique(np.concatenate(list(s1.values())))) == 1000


def test_cli_with_montage(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="fa-data")
    pf.register_cli(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["pathfinder", "--resolution", "32", "--n", "6", "--out", str(tmp_path),
                              "--workers", "1", "--format", "png", "--seed", "1",
                              "--montage", str(tmp_path / "m.png"), "--no-progress"])
    assert args.func(args) == 0
    assert (tmp_path / "m.png").stat().st_size > 1000
    assert (tmp_path / "pathfinder32/curv_contour_length_14/generator.json").is_file()
    assert "images_per_s" in capsys.readouterr().out
