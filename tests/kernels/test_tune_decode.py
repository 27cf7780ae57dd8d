"""The decode tile sweep (research/kernel_probes/tune_decode.py): its arguments, grid and time
bound, and one tiny sweep end to end under the Triton interpreter."""
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "research" / "kernel_probes"))

import tune_decode  # noqa: E402

def test_default_grid_and_its_time_bound():
    args = tune_decode.parse_args(["out"])
    assert len(tune_decode.shapes(args)) == 24
    assert len(args.tiles) == 18 and dict(BLOCK_N=64, num_stages=3, num_warps=4) in args.tiles
    assert args.heads == [(32, 8), (32, 32)] and args.split_factors == [0.5, 2.0, 4.0]
    assert tune_decode.estimate_seconds(args) < 8 * 60
    fewer = tune_decode.parse_args(["out", "--block-n", "64", "--top-tiles", "1", "--rounds", "1"])
    assert tune_decode.estimate_seconds(fewer) < tune_decode.estimate_seconds(args) / 3

def test_split_requests_are_clipped_to_whole_tiles():
    assert tune_decode.split_requests(32, [0.5, 2, 4], 16384, 64) == [16, 64, 128]
    assert tune_decode.split_requests(32, [0.5, 2, 4], 4096, 128) == [16, 32, 32]
    assert tune_decode.split_requests(1, [0.5, 2, 4], 65536, 64) == [1, 2, 4]
    assert tune_decode.split_requests(5, [0.5], 10, 64) == [1]

@pytest.mark.parametrize("flags,message", [
    (["--block-n", "48"], r"tiles\['BLOCK_N'\] must be a power of 2 in \[16, 256\], got 48"),
    (["--stages", "2,x"], "--stages: '2,x' must be a comma list of ints >= 1"),
    (["--heads", "32:5"], "heads: '32:5' must be HQ:HKV"),
    (["--head-dims", "64,512"], "--head-dims: 512 is above 256"),
    (["--split-factors", "2,0"], "--split-factors: must be a comma list of numbers > 0"),
    (["--rounds", "0"], r"--rounds: 0 is out of range \(>= 1\)"),
    (["--dtype", "fp8"], "dtype must be one of"),
])
def test_bad_arguments_give_one_line(capsys, flags, message):
    with pytest.raises(SystemExit):
        tune_decode.parse_args(["out", *flags])
    assert re.search(message, capsys.readouterr().err)

def test_tiny_sweep_on_the_interpreter(tmp_path):
    rows = tune_decode.main([str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                             "--batches", "1", "--cache-lens", "300", "--heads", "4:2",
                             "--head-dims", "16", "--block-n", "16,32", "--stages", "1",
                             "--warps", "4", "--top-tiles", "1", "--split-factors", "0.5,2",
                             "--rounds", "1", "--rep-ms", "1"])
    saved = json.loads((tmp_path / "tune_decode.json").read_text())
    assert saved["rows"] == rows and saved["environment"]["torch"]
    steps = [r["step"] for r in rows]
    assert steps[:3] == ["default", "tiles", "tiles"] and set(steps[3:]) == {"splits"}
    assert rows[0]["speedup"] == 1.0 and rows[0]["splits"] == 2  # 2 programs on 8 SMs, 300 keys
    assert all(r["correct"] and r["ref_rel_err"] < 1e-5 and r["max_abs_diff"] < 1e-5
               for r in rows)
    for tile in (16, 32):  # each tile's split counts are distinct
        counts = [r["splits"] for r in rows if r["BLOCK_N"] == tile and r["step"] != "default"]
        assert len(counts) == len(set(counts))
    assert {r["splits"] for r in rows if r["step"] == "splits"} >= {1, 4}


def test_a_wrong_configuration_is_marked_and_never_best(tmp_path, monkeypatch, capsys):
    real = tune_decode.flash_attn_with_kvcache

    def off_by_one_at_32(*args, tiles=None, **kwargs):
        out = real(*args, tiles=tiles, **kwargs)
        return out + 1 if tiles and tiles["BLOCK_N"] == 32 else out
    monkeypatch.setattr(tune_decode, "flash_attn_with_kvcache", off_by_one_at_32)
    rows = tune_decode.main([str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                             "--batches", "1", "--cache-lens", "40", "--heads", "2:1",
                             "--head-dims", "16", "--block-n", "16,32", "--stages", "1",
                             "--warps", "4", "--top-tiles", "2", "--split-factors", "2",
                             "--rounds", "1", "--rep-ms", "1"])
    assert [r["correct"] for r in rows if r["BLOCK_N"] == 32] == [False]  # and no split step
    assert all(r["correct"] for r in rows if r["BLOCK_N"] == 16)
    printed = capsys.readouterr().out
    assert "INCORRECT" in printed and "BEST BLOCK_N 16 " in printed
