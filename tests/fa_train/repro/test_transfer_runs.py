"""Runs that start from another run's weights (`init_from`: Path-64 -> Path-X transfer)."""
import io
import json
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from rich.console import Console

from fa_train.repro.recipe import RecipeError
from fa_train.repro.runner import Outcome, run_recipe

TRANSFER = textwrap.dedent("""
    name: transfer
    title: "Transfer — a recipe for tests"
    description: a pretraining run and a run that starts from its weights
    runs:
      - {name: pre, kind: train, experiment: lra/pathfinder64}
      - {name: tuned, kind: train, experiment: lra/pathx, init_from: pre}
      - {name: alone, kind: train, experiment: lra/pathx}
    scales:
      smoke: {hardware: "CPU", measures: "wiring"}
      gpu: {hardware: "one GPU", measures: "speed", runs: [pre, tuned]}
      full: {hardware: "one GPU", measures: "accuracy"}
    metrics:
      acc: {keys: [test/acc]}
    paper:
      source: "a test"
      label: "paper's numbers"
      hardware: "A100"
      tables: {t: {caption: "T", unit: "%", columns: [acc], rows: {Flash: [61.4]}}}
    report:
      tables: [{paper_table: t, rows: {Flash: tuned}, columns: {acc: {metric: acc}}}]
""")


WEIGHTS = {"model.w": torch.arange(3.0)}


class Trainer:
    """Fake training runs: each writes metrics.json and a checkpoint, or fails when told to."""

    def __init__(self, fail=(), stall=()):
        self.fail, self.stall, self.calls, self.sources_found = set(fail), set(stall), [], {}

    def __call__(self, run, run_dir, timeout_s):
        self.calls.append((run.name, dict(run.overrides)))
        if "init_from" in run.overrides:
            ckpt = Path(run.overrides["init_from"]) / "checkpoints" / "last.ckpt"
            self.sources_found[run.name] = ckpt.is_file()
        if run.name in self.fail:
            return Outcome(1, "ValueError: broken\n")
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        torch.save({"state_dict": WEIGHTS, "optimizer_states": [{"exp_avg": torch.zeros(3)}],
                    "epoch": 2}, run_dir / "checkpoints" / "last.ckpt")
        torch.save(WEIGHTS, run_dir / "checkpoints" / "best_weights.pt")
        status = "stalled" if run.name in self.stall else "ok"
        (run_dir / "metrics.json").write_text(json.dumps({"status": status, "test/acc": 0.6}))
        return Outcome(0, "")


def _run(make_recipe, out, trainer, **kw):
    said = io.StringIO()
    data = run_recipe(make_recipe("transfer", TRANSFER), "smoke", out, executor=trainer,
                      console=Console(file=said, width=200), **kw)
    return data, said.getvalue()


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_run_starts_from_its_sources_kept_checkpoint(make_recipe, tmp_path, jobs):
    out = tmp_path / "out"
    trainer = Trainer()
    data, _ = _run(make_recipe, out, trainer, jobs=jobs)
    order = [name for name, _ in trainer.calls]
    assert order.index("pre") < order.index("tuned")
    overrides = dict(trainer.calls)
    assert overrides["tuned"]["init_from"] == str(out / "pre")
    assert "init_from" not in overrides["pre"] and "init_from" not in overrides["alone"]
    assert data["runs"]["tuned"]["overrides"]["init_from"] == str(out / "pre")
    assert trainer.sources_found == {"tuned": True}                       # kept for tuned,
    assert not (out / "pre" / "checkpoints").exists()                     # then released
    assert not (out / "tuned" / "checkpoints").exists()                   # nobody starts from it
    assert not (out / "alone" / "checkpoints").exists()


def test_a_source_keeps_its_checkpoint_while_a_run_from_it_is_not_done(make_recipe, tmp_path):
    out = tmp_path / "out"
    data, said = _run(make_recipe, out, Trainer(fail={"tuned"}))
    assert data["runs"]["tuned"]["status"] == "failed"
    assert "deleted" not in said
    kept = out / "pre" / "checkpoints"          # the final weights alone: pre will not resume
    assert [p.name for p in kept.iterdir()] == ["last.ckpt"]
    state = torch.load(kept / "last.ckpt", weights_only=False)
    assert list(state) == ["state_dict"] and torch.equal(state["state_dict"]["model.w"], WEIGHTS["model.w"])
    data, said = _run(make_recipe, out, Trainer())                      # tuned again: now done
    assert data["runs"]["tuned"]["status"] == "ok"
    assert not (out / "pre" / "checkpoints").exists()
    assert "pre: checkpoint deleted (every run that starts from it ended ok)" in said
    _run(make_recipe, out, Trainer(), force=True, keep_checkpoints=True)
    assert (out / "pre" / "checkpoints" / "last.ckpt").is_file()          # asked to keep


def test_a_source_keeps_its_checkpoint_for_a_run_from_it_that_stalled(make_recipe, tmp_path):
    """A stalled run is a result, and the one most likely to run again from the same weights."""
    out = tmp_path / "out"
    data, said = _run(make_recipe, out, Trainer(stall={"tuned"}))
    assert data["runs"]["tuned"]["status"] == "stalled" and "deleted" not in said
    assert (out / "pre" / "checkpoints" / "last.ckpt").is_file()
    data, said = _run(make_recipe, out, Trainer(), force=True)
    assert data["runs"]["tuned"]["status"] == "ok" and not (out / "pre" / "checkpoints").exists()


def test_a_merge_releases_the_sources_it_completes(make_recipe, tmp_path, monkeypatch, capsys):
    from fa_train.repro import cli
    monkeypatch.setenv("FA_RECIPES_DIR", str(make_recipe("transfer", TRANSFER).path.parent))
    here, host = tmp_path / "here", tmp_path / "host"
    _run(make_recipe, here, Trainer(fail={"tuned"}))                     # pre kept for tuned
    results = json.loads((here / "results.json").read_text())
    results["runs"]["tuned"]["finished"] = "2026-01-01T00:00:00+00:00"   # before the host's
    (here / "results.json").write_text(json.dumps(results))
    _run(make_recipe, host, Trainer())                                   # another machine: both
    assert cli.main(["merge", str(host), "--into", str(here), "--only", "tuned"]) == 0
    said = capsys.readouterr().out
    assert "1 run(s) merged (tuned)" in said and "pre: checkpoint deleted" in said
    assert not (here / "pre" / "checkpoints").exists()


def test_a_run_starts_when_its_own_source_ends_not_after_every_other_run(make_recipe, tmp_path):
    """Two at a time: `alone` (no source) runs beside `pre` and finishes only once `tuned`,
    which starts from `pre`, has started."""
    tuned_started = threading.Event()

    class Ordered(Trainer):
        def __call__(self, run, run_dir, timeout_s):
            if run.name == "tuned":
                tuned_started.set()
            if run.name == "alone":
                assert tuned_started.wait(10), "tuned waited for alone, which has nothing to give it"
            return super().__call__(run, run_dir, timeout_s)

    data, _ = _run(make_recipe, tmp_path / "out", Ordered(), jobs=2)
    assert {n: e["status"] for n, e in data["runs"].items()} == \
        {"pre": "ok", "tuned": "ok", "alone": "ok"}


def test_a_run_waits_while_its_source_is_not_ok(make_recipe, tmp_path):
    out = tmp_path / "out"
    data, said = _run(make_recipe, out, Trainer(fail={"pre"}))
    assert data["runs"]["pre"]["status"] == "failed" and "tuned" not in data["runs"]
    assert "tuned: waits for pre (failed)" in said
    trainer = Trainer()
    data, _ = _run(make_recipe, out, trainer)          # the source fixed: both run now
    assert [n for n, _ in trainer.calls] == ["pre", "tuned"]
    assert data["runs"]["tuned"]["status"] == "ok"


def test_a_source_without_its_checkpoint_is_named(make_recipe, tmp_path):
    out = tmp_path / "out"
    _run(make_recipe, out, Trainer(), only=["pre"])
    (out / "pre" / "checkpoints" / "last.ckpt").unlink()
    data, said = _run(make_recipe, out, Trainer(), only=["tuned"])
    assert "tuned" not in data["runs"]
    assert "waits for pre (ok, but its checkpoint is gone: run it again with --force)" in said


@pytest.mark.parametrize("edit, message", [
    (("init_from: pre}", "init_from: later}"), "init_from must name an earlier train run"),
    (("runs: [pre, tuned]", "runs: [tuned]"), "runs 'tuned' but not 'pre'"),
])
def test_bad_sources_are_named(make_recipe, edit, message):
    with pytest.raises(RecipeError, match=message):
        make_recipe("transfer", TRANSFER.replace(*edit))
