"""`fa-repro results`: README.md's glance table and RESULTS.md, rendered from the result files."""
import json
import shutil

import pytest

from fa_train.repro.cli import main
from fa_train.repro.recipe import list_recipe_paths, load_recipe
from fa_train.repro.results import BEGIN, GLANCE_BEGIN, GLANCE_END, ROOT, glance_table, sync


def test_committed_pages_are_up_to_date():
    assert sync(check=True) == []
    assert main(["results", "--check"]) == 0


def test_stale_pages_are_found_then_rewritten(tmp_path):
    for name in ("README.md", "RESULTS.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    readme = (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text(
        readme[:readme.index(GLANCE_BEGIN)] + f"{GLANCE_BEGIN}\n| stale |\n{GLANCE_END}"
        + readme[readme.index(GLANCE_END) + len(GLANCE_END):])
    results = (tmp_path / "RESULTS.md").read_text()
    (tmp_path / "RESULTS.md").write_text(results.replace(BEGIN, BEGIN + "\nhand-typed 999"))
    assert sync(check=True, root=tmp_path) == ["README.md", "RESULTS.md"]
    assert sync(root=tmp_path) == ["README.md", "RESULTS.md"]
    assert sync(check=True, root=tmp_path) == []
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()


def test_missing_markers_are_named(tmp_path):
    (tmp_path / "README.md").write_text("no markers")
    (tmp_path / "RESULTS.md").write_text("no markers")
    with pytest.raises(ValueError, match="README.md lacks"):
        sync(check=True, root=tmp_path)


def test_glance_has_one_row_per_recipe_with_the_papers_number():
    rows = glance_table()[2:]
    recipes = [load_recipe(p) for p in list_recipe_paths()]
    assert len(rows) == len(recipes)
    for row, recipe in zip(rows, recipes):
        spec = recipe.report["glance"]
        table = recipe.paper["tables"][recipe.report["tables"][0]["paper_table"]]
        paper = table["rows"][spec["paper"]["row"]][list(table["columns"]).index(spec["paper"]["column"])]
        assert f"{spec['paper']['row']}, {spec['paper']['column']}: {paper}" in row
        assert f"reports/{recipe.name}/" in row or "not run yet" in row


def glance_of(mini_recipe, tmp_path, monkeypatch, statuses):
    """The mini recipe's glance row over results folders {folder: status of its one run}."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    cell = {"row": "Baseline", "column": "ppl"}
    mini_recipe.data["report"]["glance"] = {"paper": cell, "ours": cell}
    entry = {"kind": "train", "run_dir": "base", "metrics": {"val/ppl": 30.0, "global_step": 9}}
    for folder, status in statuses.items():
        out = tmp_path / "reports" / "mini" / folder
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(
            {"host": {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"]}, "updated": "2026-01-02",
             "runs": {"base": dict(entry, status=status)}}))
    return results._glance_row(mini_recipe)


def test_glance_skips_a_larger_scale_whose_cell_has_no_value(mini_recipe, tmp_path, monkeypatch):
    """A full scale with only paused runs does not hide the gpu scale's finished number."""
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"full": "paused", "gpu": "ok"})
    assert "reports/mini/gpu/report.md" in row and ": 30" in row
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu": "failed"})
    assert "reports/mini/full/report.md" in row and "paused" in row


def test_glance_falls_back_to_a_scales_earlier_protocol(mini_recipe, tmp_path, monkeypatch):
    """A redesigned scale not yet run: the glance shows the kept earlier protocol's number and
    links its folder; without any value it shows the current scale's status."""
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu": "paused", "gpu-100steps": "ok"})
    assert "reports/mini/gpu-100steps/report.md" in row
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu-100steps": "failed"})
    assert "reports/mini/gpu/report.md" in row and "paused" in row


def test_glance_shows_several_rows_side_by_side(mini_recipe, tmp_path, monkeypatch):
    """Runs that split (seeds) are shown together: one value per row, under the spec's label."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    mini_recipe.data["report"]["glance"] = {
        "paper": {"row": "Baseline", "column": "ppl"},
        "ours": {"row": ["Baseline", "Flash"], "label": "both runs", "column": "ppl"}}
    out = tmp_path / "reports" / "mini" / "gpu"
    out.mkdir(parents=True)
    runs = {name: {"kind": "train", "run_dir": name, "status": status,
                   "metrics": {"val/ppl": ppl, "global_step": 9}}
            for name, ppl, status in (("base", 30.0, "ok"), ("fast", 25.5, "paused"))}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-01-02", "runs": runs}))
    row = results._glance_row(mini_recipe)
    assert "both runs, ppl: 30.00 / paused" in row and "reports/mini/gpu/report.md" in row


def test_glance_date_is_when_the_cells_runs_finished(mini_recipe, tmp_path, monkeypatch):
    """A results file updated later by other runs keeps the date of the run the glance cell shows."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    cell = {"row": "Baseline", "column": "ppl"}
    mini_recipe.data["report"]["glance"] = {"paper": cell, "ours": cell}
    out = tmp_path / "reports" / "mini" / "gpu"
    out.mkdir(parents=True)
    runs = {"base": {"kind": "train", "run_dir": "base", "status": "ok", "finished": "2026-01-02T10:00",
                     "metrics": {"val/ppl": 30.0}},
            "fast": {"kind": "train", "run_dir": "fast", "status": "paused", "finished": "2026-03-04T10:00",
                     "metrics": {}}}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-03-04T10:00", "runs": runs}))
    row = results._glance_row(mini_recipe)
    assert ": 30.00" in row and "| H100, 2026-01-02 |" in row
    del runs["base"]["finished"]                  # no run date: the file's
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-03-04T10:00", "runs": runs}))
    assert "| H100, 2026-03-04 |" in results._glance_row(mini_recipe)
