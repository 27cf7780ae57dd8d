"""A scale that borrows runs of the same settings from another scale's folder reports them without
running them again; and the share of seeds whose curve reached a level."""
import json
from pathlib import Path

from fa_train.repro.recipe import Recipe, validate_recipe
from fa_train.repro.report import Ours, render_report

PROTOCOL = {"trainer.max_steps": 100}
REACHED = {"reached": {"curve": "val/acc", "at_least": 0.2}, "unit": "% of seeds", "scale": 100,
           "so_far": True}


def _recipe(tmp_path: Path, full: dict | None = None) -> Recipe:
    full = full or {"runs": ["s2"], "train_overrides": PROTOCOL,
                    "borrows": {"scale": "gpu", "runs": ["s0", "s1"]}}
    return Recipe(tmp_path / "r.yaml", {
        "name": "r", "title": "R", "description": "seeds",
        "runs": [{"name": n, "kind": "train", "experiment": "lra/listops"} for n in ("s0", "s1", "s2")],
        "scales": {"smoke": {"hardware": "CPU", "measures": "wiring", "runs": ["s0"]},
                   "gpu": {"hardware": "GPU", "measures": "two seeds", "runs": ["s0", "s1"],
                           "train_overrides": PROTOCOL},
                   "full": {"hardware": "GPU", "measures": "three seeds", **full}},
        "metrics": {"acc": {"keys": ["test/acc"], "unit": "%", "scale": 100},
                    "left": REACHED},
        "paper": {"source": "a test", "label": "paper's numbers", "hardware": "GPU",
                  "tables": {"t": {"caption": "T", "unit": "%", "columns": ["acc", "left"],
                                   "rows": {"Model": [36.0, 100]}}}},
        "report": {"tables": [{"paper_table": "t", "columns": {"acc": {"metric": "acc"},
                                                               "left": {"metric": "left"}},
                               "rows": {"seeds (ours only)": {"acc": ["s0", "s1", "s2"],
                                                              "left": ["s0", "s1", "s2"]}}}]}})


def _record(folder: Path, scale: str, runs: dict[str, tuple[str, float | None, str]]) -> None:
    """Write results.json and each run's metrics.csv: name -> (status, test/acc, csv rows)."""
    folder.mkdir(parents=True)
    entries = {}
    for name, (status, acc, rows) in runs.items():
        (folder / name).mkdir()
        (folder / name / "metrics.csv").write_text("step,val/acc\n" + rows)
        entries[name] = {"status": status, "kind": "train", "run_dir": name,
                         "metrics": {} if acc is None else {"test/acc": acc}}
    (folder / "results.json").write_text(json.dumps({"recipe": "r", "scale": scale,
                                                     "runs": entries}))


def test_a_full_scale_reports_the_gpu_scale_runs_it_borrows(tmp_path):
    recipe = _recipe(tmp_path)
    assert validate_recipe(recipe) == []
    _record(tmp_path / "gpu", "gpu", {"s0": ("ok", 0.36, "249,0.17\n499,0.30\n"),
                                      "s1": ("ok", 0.17, "249,0.17\n499,0.17\n")})
    _record(tmp_path / "full", "full", {"s2": ("paused", None, "249,0.25\n")})
    ours = Ours(recipe, tmp_path / "full")
    assert ours.borrowed == {"s0": "gpu", "s1": "gpu"}
    assert ours.cell("s0", "acc") == (36.0, "")
    # the share: s0 reached 20%, s1 finished without, s2 (paused) already has
    assert [ours.cell(r, "left")[0] for r in ("s0", "s1", "s2")] == [100.0, 0.0, 100.0]
    text = render_report(recipe, "full", tmp_path / "full").read_text()
    assert "| s0 (gpu scale) | train | ok |" in text
    assert "1 at this scale and 2 of the same settings reported from the gpu scale's folder" in text
    assert Ours(recipe, tmp_path / "gpu").borrowed == {}


def test_a_paused_run_that_has_not_reached_the_level_has_no_share_yet(tmp_path):
    recipe = _recipe(tmp_path)
    _record(tmp_path / "gpu", "gpu", {"s0": ("paused", None, "249,0.17\n")})
    assert Ours(recipe, tmp_path / "gpu").cell("s0", "left") == (None, "paused")


def test_borrowing_needs_the_same_settings_and_runs_the_other_scale_runs(tmp_path):
    def problems(full):
        return " | ".join(validate_recipe(_recipe(tmp_path, full)))
    assert "whose train_overrides differ" in problems(
        {"runs": ["s2"], "train_overrides": {"trainer.max_steps": 200},
         "borrows": {"scale": "gpu", "runs": ["s0"]}})
    assert "which scale 'gpu' must run and this one must not" in problems(
        {"runs": ["s2"], "train_overrides": PROTOCOL, "borrows": {"scale": "gpu", "runs": ["s2"]}})
    assert "borrows.scale must be another scale" in problems(
        {"runs": ["s2"], "train_overrides": PROTOCOL, "borrows": {"scale": "full", "runs": ["s0"]}})
    assert "borrows must be {scale: SCALE, runs: [RUN, ...]}" in problems(
        {"runs": ["s2"], "borrows": ["s0"]})
