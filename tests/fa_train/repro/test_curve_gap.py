"""Curve-gap cells: the largest difference of two runs' metrics.csv curves over their common x."""
import json
from pathlib import Path

import pytest

from fa_train.repro.recipe import Recipe, load_recipe, validate_recipe
from fa_train.repro.report import Ours, our_row

GAP = {"derive": "curve_gap", "curve": "train/loss", "baseline_row": "base"}
TABLE = {"paper_table": "t", "rows": {"base": "a", "other": "b"}, "columns": {"gap": GAP}}


def _ours(tmp_path: Path, curves: dict[str, str], status_b: str = "ok", caches=(None, None)) -> Ours:
    tmp_path.mkdir(parents=True, exist_ok=True)
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": {}, "runs": [{"name": "a"}, {"name": "b"}]})
    metrics = [{"token_cache": c} if c else {} for c in caches]
    runs = {"a": {"status": "ok", "kind": "train", "run_dir": "a", "metrics": metrics[0]},
            "b": {"status": status_b, "kind": "train", "run_dir": "b", "metrics": metrics[1]}}
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    for run, text in curves.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.csv").write_text(text)
    return Ours(recipe, tmp_path)


def _gap(ours: Ours, row: str = "other"):
    return our_row(ours, TABLE, row, ["gap"], {})["gap"]


def test_largest_difference_over_common_steps_only(tmp_path):
    ours = _ours(tmp_path, {
        # step 20 only in a (a huge value that must be ignored); validation rows have no train/loss
        "a": "step,train/loss,val/loss\n0,10.0,\n10,6.0,\n20,99.0,\n29,,5.0\n30,4.0,\n",
        "b": "step,train/loss,val/loss\n0,10.0,\n10,6.25,\n29,,9.0\n30,3.9,\n"})
    value, why = _gap(ours)
    assert why == "" and value == pytest.approx(0.25)
    assert _gap(ours, "base") == (0.0, "")
    table = {**TABLE, "columns": {"gap": {**GAP, "baseline_rows": {"base": "other"}}}}
    assert our_row(ours, table, "base", ["gap"], {})["gap"][0] == pytest.approx(0.25)


def test_other_curves_and_x_columns(tmp_path):
    ours = _ours(tmp_path, {"a": "step,tokens_seen,val/loss\n99,100,5.0\n199,200,4.0\n",
                            "b": "step,tokens_seen,val/loss\n99,100,5.5\n199,200,3.0\n"})
    table = {**TABLE, "columns": {"gap": {**GAP, "curve": "val/loss", "x": "tokens_seen"}}}
    assert our_row(ours, table, "other", ["gap"], {})["gap"] == (1.0, "")


def test_at_the_end_the_signed_difference_at_the_last_common_point(tmp_path):
    ours = _ours(tmp_path, {"a": "step,val/loss\n99,5.0\n199,4.0\n299,3.0\n",
                            "b": "step,val/loss\n99,5.5\n199,3.5\n"})
    table = {**TABLE, "columns": {"gap": {**GAP, "curve": "val/loss", "at": "end"}}}
    assert our_row(ours, table, "other", ["gap"], {})["gap"] == (pytest.approx(-0.5), "")


def test_no_common_points_or_run_not_done(tmp_path):
    ours = _ours(tmp_path / "x", {"a": "step,train/loss\n0,1.0\n", "b": "step,train/loss\n5,1.0\n"})
    assert _gap(ours) == (None, "no common points")
    ours = _ours(tmp_path / "y", {"a": "step,train/loss\n0,1.0\n", "b": "step,train/loss\n0,1.0\n"}, "failed")
    assert _gap(ours) == (None, "failed")


def test_runs_that_read_different_token_caches_are_not_compared(tmp_path):
    curves = {"a": "step,val/loss\n99,5.0\n", "b": "step,val/loss\n99,5.5\n"}
    table = {**TABLE, "columns": {"gap": {**GAP, "curve": "val/loss"}}}
    other = _ours(tmp_path / "x", curves, caches=("large-gpt2-aaa", "large-gpt2-bbb"))
    assert our_row(other, table, "other", ["gap"], {})["gap"] == (None, "other data")
    same = _ours(tmp_path / "y", curves, caches=("large-gpt2-aaa", "large-gpt2-aaa"))
    unknown = _ours(tmp_path / "z", curves, caches=("large-gpt2-aaa", None))  # recorded before the key existed
    assert our_row(same, table, "other", ["gap"], {})["gap"] == our_row(unknown, table, "other", ["gap"], {})["gap"] \
        == (0.5, "")


def test_a_paused_run_counts_up_to_its_pause_and_scale_gives_points(tmp_path):
    ours = _ours(tmp_path, {"a": "step,val/acc\n99,0.10\n199,0.20\n299,0.30\n",
                            "b": "step,val/acc\n99,0.11\n199,0.23\n"}, "paused")
    table = {**TABLE, "columns": {"gap": {**GAP, "curve": "val/acc", "scale": 100}}}
    value, why = our_row(ours, table, "other", ["gap"], {})["gap"]
    assert why == "paused" and value == pytest.approx(3.0)


def test_reach_ratio_compares_times_at_every_level_both_reached(tmp_path):
    """Row b is the baseline here: its times over a's at b's levels that a also reached (0.2 and
    0.3, not 0.5), the median, with the range, the count and the highest common level."""
    ours = _ours(tmp_path, {"a": "step,time/train_s,val/acc\n99,10,0.2\n199,20,0.35\n",
                            "b": "step,time/train_s,val/acc\n99,30,0.2\n199,50,0.3\n299,90,0.5\n"})
    table = {**TABLE, "rows": {"base": "b", "other": "a"},
             "columns": {"gap": {"derive": "reach_ratio", "curve": "val/acc", "scale": 100,
                                 "baseline_row": "base"}}}
    value, why = our_row(ours, table, "other", ["gap"], {})["gap"]
    assert value == pytest.approx((3.0 + 2.5) / 2)
    assert why == "2.50-3.00 over 2 levels up to 30.0"


def test_reach_ratio_of_a_run_below_every_baseline_level_says_so(tmp_path):
    ours = _ours(tmp_path, {"a": "step,time/train_s,val/acc\n99,10,0.1\n",
                            "b": "step,time/train_s,val/acc\n99,30,0.2\n199,50,0.3\n"})
    table = {**TABLE, "rows": {"base": "b", "other": "a"},
             "columns": {"gap": {"derive": "reach_ratio", "curve": "val/acc", "baseline_row": "base"}}}
    assert our_row(ours, table, "other", ["gap"], {})["gap"] == (None, "no level both reached")


def test_recipe_check_names_a_curve_gap_without_its_baseline(tmp_path):
    recipe = load_recipe("table2_gpt2")
    data = json.loads(json.dumps(recipe.data))
    columns = data["report"]["tables"][0]["columns"]
    columns["max Δ train loss"] = {"derive": "curve_gap", "curve": "train/loss", "baseline_row": "nope"}
    columns["final Δ val loss"] = {"derive": "curve_gap", "curve": "val/loss", "at": "last",
                                   "baseline_row": "GPT-2 small · HuggingFace"}
    problems = validate_recipe(Recipe(recipe.path, data))
    assert any("curve_gap needs" in p for p in problems)
    assert any("`at` must be widest or end, got 'last'" in p for p in problems)
