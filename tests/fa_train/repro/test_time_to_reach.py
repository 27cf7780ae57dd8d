"""Time-to-accuracy cells: the first logged time at which a curve reaches its level, else why not."""
import json
from pathlib import Path

from fa_train.repro.recipe import Recipe
from fa_train.repro.report import Ours

REACH = {"curve": "val/acc", "at_least": 0.35, "x": "time/train_s"}


def _ours(tmp_path: Path, csv_text: str | None) -> Ours:
    tmp_path.mkdir(parents=True, exist_ok=True)
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": {"to35": {"reach": REACH}},
                                          "runs": [{"name": "a"}]})
    (tmp_path / "results.json").write_text(json.dumps(
        {"runs": {"a": {"status": "ok", "kind": "train", "run_dir": "a", "metrics": {}}}}))
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
