"""fa-repro merge: runs from another output folder replace older entries, paths moved along."""
import json

import pytest

from fa_train.repro import cli
from fa_train.repro.merge import merge_results
from fa_train.repro.metrics_csv import read_rows
from fa_train.repro.recipe import RecipeError
from fa_train.repro.runner import run_recipe

from .test_repro_runner import FakeExecutor, quiet


@pytest.fixture
def scratch(mini_recipe, tmp_path, monkeypatch):
    """An output folder as a GPU host leaves it: runs base, fast and bench done there."""
    monkeypatch.setenv("FA_RECIPES_DIR", str(mini_recipe.path.parent))
    src = tmp_path / "host" / "scratch"
    run_recipe(mini_recipe, "gpu", src, executor=FakeExecutor({"base": "pause"}), console=quiet())
    (src / "fast" / "metrics.csv").write_text("step,train/loss\n1,2.0\n")
    (src / "base" / "metrics.csv").write_text("step,train/loss\n1,2.0\n")
    record = {"status": "ok", "output_dir": str(src / "fast"),
              "metrics_csv": str(src / "fast" / "metrics.csv")}
    (src / "fast" / "metrics.json").write_text(json.dumps(record))
    (src / "fast" / "run.log").write_text(f"[fa-train] outputs in {src / 'fast'}\n")
    return src


def test_runs_and_their_folders_come_over_with_paths_moved(scratch, tmp_path):
    dest = tmp_path / "reports" / "mini" / "gpu"
    where, taken = merge_results(scratch, dest)
    assert where == dest and taken == ["base", "fast", "bench"]
    data = json.loads((dest / "results.json").read_text())
    assert data["recipe"] == "mini" and data["scale"] == "gpu" and data["host"]
    base = data["runs"]["base"]
    assert base["status"] == "paused" and f"hydra.run.dir={dest}/base" in base["command"]
    assert not any(str(scratch) in json.dumps(e) for e in data["runs"].values())
    assert (dest / "base" / "checkpoints" / "last.ckpt").is_file()    # a paused run can continue
    assert not (dest / "fast" / "metrics.csv").exists()                # finished: compressed
    assert read_rows(dest / "fast" / "metrics.csv") == [{"step": "1", "train/loss": "2.0"}]
    assert (dest / "base" / "metrics.csv").is_file()                   # paused: appended to next
    record = json.loads((dest / "fast" / "metrics.json").read_text())   # records point here
    assert record["output_dir"] == str(dest / "fast")
    assert record["metrics_csv"] == str(dest / "fast" / "metrics.csv")
    assert str(scratch) in (dest / "fast" / "run.log").read_text()      # logs stay as written
    assert merge_results(scratch, dest)[1] == []                       # nothing newer: no change


def test_only_newer_entries_replace_and_only_filters(scratch, tmp_path):
    dest = tmp_path / "reports"
    merge_results(scratch, dest, only=["fast"])
    assert set(json.loads((dest / "results.json").read_text())["runs"]) == {"fast"}
    mine = json.loads((dest / "results.json").read_text())
    mine["runs"]["fast"]["finished"] = "2999-01-01T00:00:00+00:00"     # ours is newer: kept
    (dest / "results.json").write_text(json.dumps(mine))
    assert merge_results(scratch, dest)[1] == ["base", "bench"]
    assert json.loads((dest / "results.json").read_text())["runs"]["fast"]["finished"].startswith("2999")


def test_the_folder_names_the_host_of_its_latest_run(scratch, tmp_path):
    """Folders from two hosts merged one after the other: the host line follows the run that
    finished last, not the order of merging."""
    dest = tmp_path / "reports"
    later = json.loads((scratch / "results.json").read_text())
    later["host"] = {"gpus": ["GPU B"]}
    for name, entry in later["runs"].items():
        entry["finished"] = "2999-01-01T00:00:00+00:00" if name == "fast" else "1999-01-01T00:00:00+00:00"
    other = tmp_path / "host_b"
    other.mkdir()
    (other / "results.json").write_text(json.dumps(later))
    merge_results(scratch, dest, only=["base"])
    merge_results(other, dest, only=["fast"])
    assert json.loads((dest / "results.json").read_text())["host"] == {"gpus": ["GPU B"]}
    first = json.loads((scratch / "results.json").read_text())["host"]
    merge_results(scratch, dest, only=["bench"])                     # finished before "fast"
    data = json.loads((dest / "results.json").read_text())
    assert data["host"] == {"gpus": ["GPU B"]} and first != data["host"]


def test_bad_merges_are_named(scratch, tmp_path, capsys):
    with pytest.raises(RecipeError, match="does not hold: nope"):
        merge_results(scratch, tmp_path / "d1", only=["nope"])
    with pytest.raises(RecipeError, match="no readable results.json"):
        merge_results(tmp_path / "empty", tmp_path / "d2")
    other = tmp_path / "d3"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({"recipe": "mini", "scale": "smoke", "runs": {}}))
    with pytest.raises(RecipeError, match="holds scale 'gpu' but .* holds 'smoke'"):
        merge_results(scratch, other)
    assert cli.main(["merge", str(scratch), "--into", str(other)]) == 2
    assert "merge folders of the same recipe and scale" in capsys.readouterr().err
    assert cli.main(["merge", str(scratch), "--into", str(tmp_path / "d4"), "--only", "bench"]) == 0
    assert "1 run(s) merged (bench)" in capsys.readouterr().out
