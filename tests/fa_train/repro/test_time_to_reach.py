"""Time-to-accuracy cells: the first logged time at which a curve reaches its level, else why not."""
import json
from pathlib import Path

from fa_train.repro.recipe import Recipe
from fa_train.repro.report import Ours

REACH = {"curve": "val/acc", "at_least": 0.35, "x": "time/train_s"}


def _ours(tmp_path: Path, csv_text: str | None, status: str = "ok", so_far: bool = False) -> Ours:
    tmp_path.mkdir(parents=True, exist_ok=True)
    metrics = {"to35": {"reach": REACH, "so_far": so_far},
               "tokens_per_s": {"keys": ["tokens_per_sec_per_device"], "so_far": so_far}}
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": metrics, "runs": [{"name": "a"}]})
    (tmp_path / "results.json").write_text(json.dumps(
        {"runs": {"a": {"status": status, "kind": "train", "run_dir": "a",
                        "metrics": {"tokens_per_sec_per_device": 1000.0}}}}))
    if csv_text is not None:
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "metrics.csv").write_text(csv_text)
    return Ours(recipe, tmp_path)


def test_first_time_at_or_above_the_level(tmp_path):
    ours = _ours(tmp_path, "step,time/train_s,val/acc,train/loss\n"
                           "10,,,2.0\n249,15.5,0.17,\n499,23.0,0.36,\n749,31.0,0.34,\n999,39.0,0.40,\n")
    assert ours.cell("a", "to35") == (23.0, "")


def test_never_reached_or_no_curve(tmp_path):
    assert _ours(tmp_path / "x", "step,time/train_s,val/acc\n249,15.5,0.17\n").cell("a", "to35") \
        == (None, "not reached")
    assert _ours(tmp_path / "y", "step,val/acc\n249,0.5\n").cell("a", "to35") == (None, "no curve")
    assert _ours(tmp_path / "z", None).cell("a", "to35") == (None, "no curve")


CURVE = "step,time/train_s,val/acc\n249,15.5,0.17\n499,23.0,0.36\n"


def test_paused_runs_give_only_metrics_measured_so_far(tmp_path):
    plain = _ours(tmp_path / "plain", CURVE, status="paused")
    assert plain.cell("a", "to35") == (None, "paused")
    assert plain.cell("a", "tokens_per_s") == (None, "paused")
    so_far = _ours(tmp_path / "so_far", CURVE, status="paused", so_far=True)
    assert so_far.cell("a", "to35") == (23.0, "")
    assert so_far.cell("a", "tokens_per_s") == (1000.0, "")
    early = _ours(tmp_path / "early", "step,time/train_s,val/acc\n249,15.5,0.17\n", "paused", True)
    assert early.cell("a", "to35") == (None, "not reached (paused)")
