"""Test accuracy at the best validation for a run that kept no best weights: its final weights'
when its best validation was its last (after its final step) and above every earlier one."""
import json
from pathlib import Path

from fa_train.repro.recipe import Recipe
from fa_train.repro.report import Ours

SPEC = {"keys": ["test_at_best_val/acc"], "final_if_best_last": {"curve": "val/acc",
                                                                   "keys": ["test/acc"]}}


def _cell(tmp_path: Path, csv_text: str, **metrics) -> tuple:
    tmp_path.mkdir(parents=True, exist_ok=True)
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": {"best": SPEC},
                                          "runs": [{"name": "a"}]})
    metrics = {"global_step": 1000, "test/acc": 0.3, **metrics}
    (tmp_path / "results.json").write_text(json.dumps({"runs": {"a": {
        "status": "ok", "kind": "train", "run_dir": "a", "metrics": metrics}}}))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "metrics.csv").write_text(csv_text)
    return Ours(recipe, tmp_path).cell("a", "best")


def test_best_last_validation_gives_the_final_weights_value(tmp_path):
    assert _cell(tmp_path, "step,val/acc\n499,0.17\n999,0.29\n") == (0.3, "")


def test_a_recorded_value_wins(tmp_path):
    assert _cell(tmp_path, "step,val/acc\n499,0.17\n999,0.29\n",
                 **{"test_at_best_val/acc": 0.25}) == (0.25, "")


def test_no_value_when_the_best_came_earlier_tied_or_before_the_end(tmp_path):
    assert _cell(tmp_path / "earlier", "step,val/acc\n499,0.35\n999,0.29\n")[0] is None
    assert _cell(tmp_path / "tied", "step,val/acc\n499,0.29\n999,0.29\n")[0] is None
    assert _cell(tmp_path / "not_at_end", "step,val/acc\n499,0.17\n749,0.29\n")[0] is None
    assert _cell(tmp_path / "no_curve", "step,train/loss\n999,2.0\n")[0] is None
