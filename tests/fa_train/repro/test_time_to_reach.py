"""Time-to-accuracy cells: the first logged time at which a curve reaches its level, else why not."""
import json
from pathlib import Path

from fa_train.repro.recipe import Recipe
from fa_train.repro.report import Ours

REACH = {"curve": "val/acc", "at_least": 0.35, "x": "time/train_s"}


def _ours(tmp_path: Path, csv_text: str | None, status: str = "ok", so_far: bool = False,
          **entry) -> Ours:
    tmp_path.mkdir(parents=True, exist_ok=True)
    metrics = {"to35": {"reach": REACH, "so_far": so_far},
               "tokens_per_s": {"keys": ["tokens_per_sec_per_device"], "unit": "tokens/s",
                                "so_far": so_far}}
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": metrics, "runs": [{"name": "a"}]})
    (tmp_path / "results.json").write_text(json.dumps(
        {"runs": {"a": {"status": status, "kind": "train", "run_dir": "a",
                        "metrics": {"tokens_per_sec_per_device": 1000.0}, **entry}}}))
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


def test_a_ratio_of_times_to_reach_says_a_finished_run_never_reached(tmp_path):
    """The speedup to a level of a run that finished without reaching it reads "not reached"."""
    from fa_train.repro.report import _ratio
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "metrics": {"to35": {"reach": REACH}},
                                          "runs": [{"name": "base"}, {"name": "slow"}]})
    (tmp_path / "results.json").write_text(json.dumps({"runs": {
        name: {"status": "ok", "kind": "train", "run_dir": name, "metrics": {}}
        for name in ("base", "slow")}}))
    for name, acc in (("base", 0.4), ("slow", 0.2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.csv").write_text(f"step,time/train_s,val/acc\n99,10.0,{acc}\n")
    table = {"rows": {"Base": {"t": {"run": "base"}}, "Slow": {"t": {"run": "slow"}}}}
    spec = {"metric": "to35", "baseline_row": "Base", "lower_is_better": True}
    ours = Ours(recipe, tmp_path)
    assert _ratio(ours, table, "Slow", "t", spec, {"t": {"run": "slow"}}, ["t"]) == \
        (None, "not reached")
    assert _ratio(ours, table, "Base", "t", spec, {"t": {"run": "base"}}, ["t"]) == (1.0, "")


def test_times_measured_while_other_runs_shared_the_gpu_are_not_shown(tmp_path):
    """A run continued beside others (fa-repro run --jobs) from step 300: its time to a level
    reached before then stands; one reached after, and its throughput, read "GPU shared"."""
    early = _ours(tmp_path / "early", CURVE, shared_from_step=300)
    assert early.cell("a", "to35") == (None, "GPU shared")
    assert early.cell("a", "tokens_per_s") == (None, "GPU shared")
    late = _ours(tmp_path / "late", CURVE, shared_from_step=500)
    assert late.cell("a", "to35") == (23.0, "")
    legacy = _ours(tmp_path / "legacy", CURVE, concurrent_runs=4)      # shared from the start
    assert legacy.cell("a", "to35") == (None, "GPU shared")
    own_gpu = _ours(tmp_path / "own", CURVE, concurrent_runs=2, gpu="1")   # --gpus: alone on it
    assert own_gpu.cell("a", "to35") == (23.0, "") and own_gpu.cell("a", "tokens_per_s")[0] == 1000.0


def test_which_metrics_are_timed():
    """Times and rates by their unit (and MFU), times to a level by their x; `timed:` overrides."""
    from fa_train.repro.report import is_timed
    for unit in ("s", "min", "ms", "tokens/s/GPU", "TFLOP/s"):
        assert is_timed({"keys": ["x"], "unit": unit}), unit
    for unit in ("%", "GiB", "steps", "M tokens", "nats", None):
        assert not is_timed({"keys": ["x"], "unit": unit}), unit
    assert is_timed({"keys": ["mfu"], "unit": "%"}) and not is_timed({"keys": ["ms"], "unit": "ms",
                                                                      "timed": False})
    assert is_timed({"reach": REACH}) and not is_timed({"reach": {**REACH, "x": "step"}})


def test_a_benchmark_timed_beside_other_runs_shows_no_time(tmp_path):
    recipe = Recipe(tmp_path / "r.yaml", {"name": "r", "runs": [{"name": "b", "kind": "bench"}],
                                          "metrics": {"ms": {"keys": ["ms"], "unit": "ms"}}})
    entry = {"status": "ok", "kind": "bench", "run_dir": "b",
             "metrics": {"attention.json": {"rows": [{"impl": "flash", "ms": 1.5}]}}}
    (tmp_path / "results.json").write_text(json.dumps({"runs": {"b": entry}}))
    assert Ours(recipe, tmp_path).cell("b", "ms") == (1.5, "")
    (tmp_path / "results.json").write_text(json.dumps({"runs": {"b": dict(entry, shared_from_step=0)}}))
    assert Ours(recipe, tmp_path).cell("b", "ms") == (None, "GPU shared")
