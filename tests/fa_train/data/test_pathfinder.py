"""Pathfinder generator: parameters, geometry invariants, determinism, formats, loader, CLI."""
import argparse
import math

import numpy as np
import pytest

from fa_train.data.cli import main as fa_data
from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder.dataset import metadata_rows
from fa_train.data.lra.pathfinder.stats import snake_turns


def test_params_follow_the_spec_table():
    p = pf.pathfinder_params(128, "hard")
    assert (p.padding, p.seed_distance, p.paddle_length, p.paddle_thickness) == (1, 20, 5, 1.5)
    assert p.margins == (2, 3) and p.marker_radius == 3 and p.continuity == 1.8
    assert p.contour_length == 14 and p.distractor_length == 4 and p.n_distractors == 35 // 4
    assert pf.pathfinder_params(256).padding == 22 and pf.pathfinder_params(256).n_distractors == 7
    # the original divides the distractor constant by the distractor length at every level
    easy = pf.pathfinder_params(32, "easy")
    assert easy.contour_length == 6 and easy.distractor_length == 2 and easy.n_distractors == 10
    assert pf.pathfinder_params(64, "intermediate").contour_length == 9
    assert pf.pathfinder_params(128, num_distractors=17).to_dict()["num_distractors"] == 17
    with pytest.raises(ValueError, match="resolution 48"):
        pf.pathfinder_params(48)
    with pytest.raises(ValueError, match="difficulty"):
        pf.pathfinder_params(32, "extreme")
    with pytest.raises(ValueError, match="num_distractors"):
        pf.pathfinder_params(32, num_distractors=-1)


def test_geometry_invariants_at_32px():
    p = pf.pathfinder_params(32)
    r = p.paddle_length + p.margins[0]
    for i in range(40):
        img, label, info = pf.generate_image(p, 123, i, return_info=True)
        assert img.dtype == np.uint8 and img.shape == (32, 32)
        assert img.min() == 0 and img.max() == 255
        t = info["targets"]
        assert [len(s.starts) for s in t] == [p.contour_length] * 2
        for s in t + info["distractors"]:
            starts = np.asarray(s.starts)
            assert starts.dtype.kind == "i" and starts.min() >= 0 and starts.max() < 32
            assert np.all(np.asarray(snake_turns([s])) <= math.pi / (2 * p.continuity) + 1e-9)
            # heads lie on the integer ring of radius L + m around each pivot: consecutive
            # paddle starts are a whole paddle-plus-gaps apart
            gaps = np.hypot(*np.diff(starts[1:], axis=0).T)
            assert np.all((gaps >= r - 1) & (gaps <= r + 2 * p.margins[0] + 2))
        a, b = info["marker_snakes"]
        assert label == int(a == b)
        assert info["markers"] == (t[a].starts[0], t[b].starts[-1])
        assert 0 <= info["num_distractors_placed"] <= p.n_distractors == info["num_distractors"]
        # markers are drawn at 1.0 whatever the stroke contrasts (targets 1.5, distractors 2.0)
        assert info["layers"]["markers"].max() == 1.0


def test_turns_are_angles_of_integer_offsets():
    p = pf.pathfinder_params(32)
    turns = np.asarray([t for i in range(20)
                        for t in snake_turns(pf.generate_image(p, 5, i, return_info=True)[2]["targets"])])
    assert np.unique(np.round(turns, 9)).size > 9  # not a fixed set of a few turn angles


def test_determinism_per_seed_and_index():
    p = pf.pathfinder_params(32)
    a, la = pf.generate_image(p, 5, 17)
    b, lb = pf.generate_image(p, 5, 17)
    c, _ = pf.generate_image(p, 5, 18)
    d, _ = pf.generate_image(p, 6, 17)
    assert np.array_equal(a, b) and la == lb
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


@pytest.mark.parametrize("resolution", [64, 128, 256])
def test_larger_resolutions_generate(resolution):
    p = pf.pathfinder_params(resolution)
    img, label, info = pf.generate_image(p, 0, 1, return_info=True)
    assert img.shape == (resolution, resolution) and img.max() == 255 and img.min() == 0
    assert [len(s.starts) for s in info["targets"]] == [14, 14]
    assert info["margin"] in p.margins


def test_npy_and_png_round_trip_through_loader(tmp_path):
    n = 10
    ref = [pf.generate_image(pf.pathfinder_params(32), 3, i) for i in range(n)]
    s_npy = pf.generate_pathfinder(tmp_path / "npy", 32, "hard", n, seed=3, fmt="npy",
                                   shard_size=4, progress=False)
    s_png = pf.generate_pathfinder(tmp_path / "png", 32, "hard", n, seed=3, fmt="png",
                                   per_dir=4, workers=2, progress=False)
    assert sorted(p.name for p in (tmp_path / "npy/pathfinder32/curv_contour_length_14/shards").glob("*.npy")) \
        == [f"{k}_{i:05d}.npy" for k in ("images", "labels") for i in range(3)]
    level = tmp_path / "png/pathfinder32/curv_contour_length_14"
    assert (level / "imgs/2/sample_1.png").is_file()
    lines = (level / "metadata/1.npy").read_text().splitlines()
    assert len(lines) == 4 and lines[0].split()[:4] == ["imgs/1", "sample_0.png", "0", str(ref[4][1])]
    for root in (tmp_path / "npy", tmp_path / "png", level):
        imgs, labels = pf.load_pathfinder(root, resolution=32)
        assert imgs.dtype == np.uint8 and imgs.shape == (n, 32, 32)
        assert np.array_equal(imgs, np.stack([r[0] for r in ref]))
        assert labels.tolist() == [r[1] for r in ref]
    assert s_npy["positives"] == s_png["positives"] == sum(r[1] for r in ref)
    assert s_png["params"]["num_distractors"] == 5
    assert s_npy["generator_version"] == pf.GENERATOR_VERSION


def test_datamodule_cache_names_the_generator_version(tmp_path):
    """Images cached by an earlier generator are never reused for the current one."""
    from fa_train.data.lra.datamodule import PathfinderDataModule

    name = PathfinderDataModule(resolution=32, cache_dir=str(tmp_path))._generated_dir().name
    assert name.endswith(f"_d5_g{pf.GENERATOR_VERSION}")


def test_reads_the_released_layout_with_either_metadata_kind(tmp_path):
    """Released folders list images in text metadata; the original generator saves NumPy
    string arrays under the same name. Both are read, in (folder, index) order."""
    from PIL import Image

    level = tmp_path / "lra_release/pathfinder32/curv_contour_length_14"
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 32, 32), dtype=np.uint8)
    rows = []
    for i, img in enumerate(imgs):
        b, j = divmod(i, 3)
        (level / f"imgs/{b}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(level / f"imgs/{b}/sample_{j}.png")
        rows.append([f"imgs/{b}", f"sample_{j}.png", str(j), str(i % 2), "1.8", "14", "4", "2", "0.5", "1", "1"])
    (level / "metadata").mkdir()
    (level / "metadata/1.npy").write_text("".join(" ".join(r) + "\n" for r in rows[3:]))
    np.save(level / "metadata/0.npy", np.array(rows[:3]))
    assert metadata_rows(level / "metadata/0.npy")[2][:2] == ["imgs/0", "sample_2.png"]
    src = pf.PathfinderImages(tmp_path, resolution=32)
    assert len(src) == 5 and src.resolution == 32 and src.dir == level
    assert src.labels.tolist() == [0, 1, 0, 1, 0]
    assert all(np.array_equal(src[i], imgs[i]) for i in range(5))


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


@pytest.mark.parametrize("flag,value", [("--n", "0"), ("--n", "-3"), ("--workers", "0"),
                                        ("--num-distractors", "-1"), ("--n", "ten")])
def test_cli_rejects_bad_counts_in_one_line(tmp_path, capsys, flag, value):
    try:
        code = fa_data(["pathfinder", "--out", str(tmp_path), "--no-progress", flag, value])
    except SystemExit as exc:        # argparse: not a number at all
        code = exc.code
    assert code not in (0, None)
    captured = capsys.readouterr()
    said = [line for line in (captured.out + captured.err).splitlines()
            if flag in line and "error" in line or "is invalid" in line]
    assert len(said) == 1, said
    assert not (tmp_path / "pathfinder32").exists()


@pytest.mark.parametrize("kw,name", [({"n": 0}, "n"), ({"n": -1}, "n"), ({"workers": 0}, "workers"),
                                     ({"shard_size": 0}, "shard_size"), ({"fmt": "tar"}, "fmt")])
def test_generate_rejects_bad_arguments(tmp_path, kw, name):
    args = {"n": 2, "progress": False, **kw}
    with pytest.raises(ValueError, match=f"^{name} "):
        pf.generate_pathfinder(tmp_path, 32, **args)


def _shards(root, n):
    imgs, labels = pf.load_pathfinder(root, resolution=32)
    assert len(imgs) == n
    return imgs, labels


def test_a_generation_past_its_deadline_pauses_and_the_next_call_continues(tmp_path, monkeypatch):
    """Whole shards survive a pause; continuing gives the same bytes as one uninterrupted call."""
    from fa_train.data.lra.pathfinder import formats
    from fa_train.errors import PreparationPaused
    monkeypatch.setattr(formats, "CHUNK", 3)
    whole = pf.generate_pathfinder(tmp_path / "whole", 32, "hard", 10, seed=5, shard_size=2,
                                   progress=False)
    with pytest.raises(PreparationPaused, match="2 of 10 images kept"):
        pf.generate_pathfinder(tmp_path / "cut", 32, "hard", 10, seed=5, shard_size=2,
                               progress=False, deadline=1.0)
    cont = pf.generate_pathfinder(tmp_path / "cut", 32, "hard", 10, seed=5, shard_size=2,
                                  progress=False)
    assert cont["continued_from"] == 2 and whole["continued_from"] == 0
    assert cont["positives"] == whole["positives"]
    for a, b in zip(_shards(tmp_path / "whole", 10), _shards(tmp_path / "cut", 10)):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="deadline needs fmt='npy'"):
        pf.generate_pathfinder(tmp_path / "png", 32, "hard", 2, fmt="png", progress=False,
                               deadline=1.0)


def test_shards_of_another_generation_are_replaced_not_mixed(tmp_path):
    pf.generate_pathfinder(tmp_path, 32, "hard", 6, seed=3, shard_size=2, progress=False)
    other = pf.generate_pathfinder(tmp_path, 32, "hard", 3, seed=4, shard_size=2, progress=False)
    assert other["continued_from"] == 0
    imgs, _ = _shards(tmp_path, 3)
    ref = [pf.generate_image(pf.pathfinder_params(32), 4, i)[0] for i in range(3)]
    assert np.array_equal(imgs, np.stack(ref))
