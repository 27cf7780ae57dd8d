"""Runner logic with a fake executor: results.json, resume, failures, OOM, timeouts, CLI, jobs."""
import io
import json
import sys
import threading
import time
import types

import pytest

from rich.console import Console

from fa_train.repro import cli
from fa_train.repro.recipe import RecipeError
from fa_train.repro.runner import Outcome, classify, failed_runs, paused_runs, run_recipe


class FakeExecutor:
    """Writes the result files a real run would, or fails the way it is told to."""

    def __init__(self, behaviour=None):
        self.behaviour = behaviour or {}
        self.calls = []

    def __call__(self, run, run_dir, timeout_s):
        self.calls.append(run.name)
        how = self.behaviour.get(run.name, "ok")
        if how == "crash":
            return Outcome(1, "Traceback ...\nValueError: data_dir /nope does not exist\n")
        if how == "cuda-oom":
            return Outcome(1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8 GiB")
        if how == "timeout":
            return Outcome(-9, "", timed_out=True)
        if how == "no-result":
            return Outcome(0, "finished")
        if how == "pause":   # stopped by pause_after: checkpoint and metrics.json say so
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"state")
            (run_dir / "metrics.json").write_text(json.dumps({"status": "paused", "global_step": 1}))
            return Outcome(0, "")
        if how == "pause-in-data":   # pause_at reached while its data was being generated
            (run_dir / "metrics.json").write_text(json.dumps(
                {"status": "paused", "paused_before_training": "generation paused"}))
            return Outcome(0, "")
        if run.kind == "bench":
            rows = [{"impl": "flash", "seqlen": 128, "pass": "fwd+bwd", "status": "ok", "ms": 1.0}]
            (run_dir / "attention.json").write_text(json.dumps({"rows": rows}))
            return Outcome(0, "")
        status = {"metrics-oom": "oom", "diverge": "diverged", "stall": "stalled"}.get(how, "ok")
        metrics = {"status": status, "val/ppl": 20.0, "tokens_per_sec_per_device": 1000.0,
                   "global_step": run.overrides.get("trainer.max_steps", 0)}
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
        return Outcome(0, "")


def quiet():
    return Console(file=open("/dev/null", "w"), width=120)


def test_records_every_run_and_resumes(mini_recipe, tmp_path):
    out = tmp_path / "out"
    fake = FakeExecutor()
    data = run_recipe(mini_recipe, "smoke", out, executor=fake, console=quiet())
    assert fake.calls == ["base", "fast", "bench"]
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == data
    assert on_disk["recipe"] == "mini" and on_disk["scale"] == "smoke"
    assert on_disk["host"]["gpus"]
    base = on_disk["runs"]["base"]
    assert base["status"] == "ok" and base["metrics"]["val/ppl"] == 20.0
    assert base["overrides"] == {"attention": "standard", "trainer.max_steps": 2}
    assert base["command"][1:6] == ["-m", "fa_train.train", "experiment=gpt2/small",
                                    "attention=standard", "trainer.max_steps=2"]
    assert on_disk["runs"]["bench"]["metrics"]["attention"]["rows"][0]["ms"] == 1.0

    again = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet())
    assert again.calls == []                       # everything done: nothing reruns

    (out / "fast" / "metrics.json").unlink()       # a lost result file is not "done"
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet())
    assert again.calls == ["fast"]
    forced = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=forced, console=quiet(), force=True,
               only=["base"])
    assert forced.calls == ["base"]

    mini_recipe.data["runs"][0]["labels"] = {"impl": "renamed"}   # a recipe relabels a done run
    relabelled = FakeExecutor()
    data = run_recipe(mini_recipe, "smoke", out, executor=relabelled, console=quiet())
    assert relabelled.calls == [] and data["runs"]["base"]["labels"] == {"impl": "renamed"}
    assert data["runs"]["base"]["metrics"]["val/ppl"] == 20.0


def test_failures_and_oom_are_results_and_retried(mini_recipe, tmp_path):
    out = tmp_path / "out"
    fake = FakeExecutor({"base": "crash", "fast": "cuda-oom", "bench": "timeout"})
    data = run_recipe(mini_recipe, "gpu", out, executor=fake, console=quiet())
    runs = data["runs"]
    assert runs["base"]["status"] == "failed"
    assert runs["base"]["error"] == "ValueError: data_dir /nope does not exist"
    assert "Traceback" in runs["base"]["output_tail"]
    assert runs["fast"]["status"] == "oom" and "CUDA out of memory" in runs["fast"]["error"]
    assert runs["bench"]["status"] == "timeout"
    assert failed_runs(data) == ["base", "bench"]  # OOM is a legitimate result

    retry = FakeExecutor({"fast": "metrics-oom"})
    data = run_recipe(mini_recipe, "gpu", out, executor=retry, console=quiet())
    assert retry.calls == ["base", "fast", "bench"]  # failed and oom runs are retried
    assert data["runs"]["base"]["status"] == "ok"
    assert data["runs"]["fast"]["status"] == "oom"   # train() caught the OOM: metrics say so
    assert data["runs"]["bench"]["status"] == "ok"


@pytest.mark.parametrize("how, status", [("diverge", "diverged"), ("stall", "stalled")])
def test_a_run_stopped_early_is_a_result_and_reruns_only_when_forced(mini_recipe, tmp_path, how,
                                                                     status):
    out = tmp_path / "out"
    data = run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor({"base": how}),
                      console=quiet())
    assert data["runs"]["base"]["status"] == status and failed_runs(data) == []
    again = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet())
    assert again.calls == []
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet(), force=True, only=["base"])
    assert again.calls == ["base"]


def test_paused_runs_keep_their_checkpoint_and_continue(mini_recipe, tmp_path):
    out = tmp_path / "out"
    fake = FakeExecutor({"base": "pause"})
    data = run_recipe(mini_recipe, "smoke", out, executor=fake, console=quiet(), pause_after=7.5)
    base = data["runs"]["base"]
    first_duration, first_started = base["duration_s"], base["started"]
    assert base["status"] == "paused" and base["stretches"] == 1
    assert base["overrides"]["pause_after"] == 7.5 and "resume" not in base["overrides"]
    assert (out / "base" / "checkpoints" / "last.ckpt").is_file()   # kept to continue
    assert failed_runs(data) == [] and paused_runs(data) == ["base"]
    assert "pause_after" not in data["runs"]["bench"]["overrides"]     # train runs only

    (out / "base" / "metrics.csv").write_text("step,train/loss\n1,2.0\n")
    again = FakeExecutor()
    data = run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet())
    assert again.calls == ["base"]                                   # only the paused run
    assert (out / "base" / "metrics.csv.gz").is_file()               # the resumed run appended;
    assert not (out / "base" / "metrics.csv").exists()               # finished: kept compressed
    base = data["runs"]["base"]
    assert base["status"] == "ok" and base["stretches"] == 2
    assert base["overrides"]["resume"] == str(out / "base")
    assert base["duration_s"] >= first_duration and base["started"] == first_started
    assert not (out / "base" / "checkpoints").exists()               # done: weights dropped


def test_a_paused_run_without_its_checkpoint_starts_over(mini_recipe, tmp_path):
    out = tmp_path / "out"
    run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor({"base": "pause"}),
               console=quiet(), only=["base"])
    (out / "base" / "checkpoints" / "last.ckpt").unlink()
    (out / "base" / "metrics.csv").write_text("step,train/loss\n1,2.0\n")
    said = io.StringIO()
    data = run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor(),
                      console=Console(file=said, width=200), only=["base"])
    assert not (out / "base" / "metrics.csv").exists()   # no rows of the earlier attempt mixed in
    assert "checkpoint is gone: starting again from step 0" in said.getvalue()
    assert "resume" not in data["runs"]["base"]["overrides"]
    assert data["runs"]["base"]["stretches"] == 1


def test_a_run_paused_in_its_data_generation_starts_next_time_without_a_warning(mini_recipe,
                                                                              tmp_path):
    out = tmp_path / "out"
    data = run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor({"base": "pause-in-data"}),
                      console=quiet(), only=["base"])
    assert data["runs"]["base"]["status"] == "paused" and paused_runs(data) == ["base"]
    said = io.StringIO()
    data = run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor(),
                      console=Console(file=said, width=200), only=["base"])
    assert data["runs"]["base"]["status"] == "ok" and "checkpoint is gone" not in said.getvalue()


def test_paused_runs_continue_first_the_nearest_to_their_end_first(mini_recipe, tmp_path):
    out = tmp_path / "out"
    run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor({"base": "pause", "fast": "pause"}),
               console=quiet())
    for name, max_steps in (("base", 100), ("fast", 4)):   # both paused at step 1
        (out / name / "config.yaml").write_text(f"trainer:\n  max_steps: {max_steps}\n")
    (out / "bench" / "attention.json").unlink()            # bench must run again too
    again = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet())
    assert again.calls == ["fast", "base", "bench"]

    run_recipe(mini_recipe, "smoke", out, executor=FakeExecutor({"base": "pause", "fast": "pause"}),
               console=quiet(), force=True)
    (out / "base" / "config.yaml").write_text("trainer: {}\n")   # unknown length: last of the paused
    (out / "fast" / "config.yaml").write_text("trainer:\n  max_steps: 100\n")
    again = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=again, console=quiet(), only=["base", "fast"])
    assert again.calls == ["fast", "base"]
    forced = FakeExecutor()
    run_recipe(mini_recipe, "smoke", out, executor=forced, console=quiet(), force=True)
    assert forced.calls == ["base", "fast", "bench"]                 # --force: recipe order


class ClockExecutor(FakeExecutor):
    """Each run takes `seconds` of (monkeypatched) monotonic time and records its timeout."""

    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds, self.timeouts = clock, seconds, {}

    def __call__(self, run, run_dir, timeout_s):
        self.timeouts[run.name] = timeout_s
        self.clock[0] += self.seconds
        return super().__call__(run, run_dir, timeout_s)


def test_time_budget_pauses_runs_in_time_and_starts_none_too_late(mini_recipe, tmp_path, monkeypatch):
    from fa_train.repro import runner
    clock = [1000.0]
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(
        monotonic=lambda: clock[0], time=lambda: clock[0] + 1e9, perf_counter=time.perf_counter,
        sleep=time.sleep))
    slow = ClockExecutor(clock, seconds=400.0)
    said = io.StringIO()
    data = run_recipe(mini_recipe, "smoke", tmp_path / "out", executor=slow, pause_after=30.0,
                      time_budget=15.0, console=Console(file=said, width=200))
    assert slow.calls == ["base", "fast"]            # 900 s budget: 100 s left, too few for bench
    end = 1000.0 + 1e9 + 900                         # the budget's end in Unix time
    for name in ("base", "fast"):                   # both pause at the end, less the margin
        assert data["runs"][name]["overrides"]["pause_at"] == round(end - runner.END_MARGIN_S)
        assert data["runs"][name]["overrides"]["pause_after"] == 30.0   # kept: whichever first
    assert slow.timeouts["fast"] == pytest.approx(500.0)
    assert "bench" not in data["runs"] and "bench: not started (time budget spent)" in said.getvalue()
    with pytest.raises(RecipeError, match="time_budget must be a positive"):
        run_recipe(mini_recipe, "smoke", tmp_path / "o3", executor=FakeExecutor(), time_budget=0,
                   console=quiet())


@pytest.mark.parametrize("flag", ["--pause-after", "--time-budget"])
def test_minute_flags_reject_non_positive_minutes(capsys, flag):
    for bad in ("0", "-3", "soon"):
        with pytest.raises(SystemExit):
            cli.main(["run", "mini", "--scale", "smoke", flag, bad])
        assert f"{flag}: must be a positive number of minutes" in capsys.readouterr().err


def test_classify():
    assert classify(Outcome(0, ""), {"status": "ok"}, True) == ("ok", None)
    assert classify(Outcome(0, ""), {}, False)[0] == "failed"            # no result file
    assert classify(Outcome(-9, ""), {}, False)[0] == "oom"              # SIGKILL: host OOM
    assert classify(Outcome(1, "RuntimeError: boom"), {}, False) == ("failed", "RuntimeError: boom")
    assert classify(Outcome(0, ""), {"status": "failed"}, True)[0] == "failed"
    assert classify(Outcome(0, ""), {"status": "paused"}, True) == ("paused", None)
    assert classify(Outcome(0, ""), {"status": "diverged", "error": "training diverged by step 50"},
                    True) == ("diverged", "training diverged by step 50")
    assert classify(Outcome(0, ""), {"status": "stalled"}, True) == ("stalled", "training stalled")
    # stopped from outside: the error says by what; after metrics.json (the run's last write,
    # after its checkpoint) the run keeps the status it recorded, so a paused one can continue
    stopped = "stopped by SIGTERM on its way out, after writing its results"
    assert classify(Outcome(-15, "[fa-train]   x"), {"status": "paused"}, True) == ("paused", stopped)
    assert classify(Outcome(-15, "[fa-train]   x"), {"status": "ok"}, True) == ("ok", stopped)
    assert classify(Outcome(-15, "x"), {"status": "failed"}, True) == \
        ("failed", "stopped by SIGTERM after writing metrics.json with status 'failed'")
    assert classify(Outcome(-15, "step 3"), {}, False) == ("failed", "stopped by SIGTERM")


def test_a_scratch_folder_says_which_runs_the_reports_folder_records(mini_recipe, tmp_path,
                                                                      monkeypatch):
    """--out to an empty folder while reports/<recipe>/<scale> records some of the runs: one note
    says so (those runs would start over); no note once the folder has its own results."""
    monkeypatch.chdir(tmp_path)
    run_recipe(mini_recipe, "smoke", None, executor=FakeExecutor({"base": "pause"}), console=quiet())
    log = tmp_path / "log"
    run_recipe(mini_recipe, "smoke", tmp_path / "scratch", dry_run=True,
               console=Console(file=open(log, "w"), width=300))
    assert (f"note: {tmp_path / 'scratch'} starts empty, but {tmp_path / 'reports/mini/smoke'} "
            f"records 3 of these runs (1 paused): copy that folder to") in log.read_text()
    run_recipe(mini_recipe, "smoke", tmp_path / "scratch", executor=FakeExecutor(), console=quiet())
    run_recipe(mini_recipe, "smoke", tmp_path / "scratch", dry_run=True,
               console=Console(file=open(log, "w"), width=300))
    assert "note:" not in log.read_text()


def test_dry_run_runs_nothing(mini_recipe, tmp_path, capsys):
    fake = FakeExecutor()
    run_recipe(mini_recipe, "gpu", tmp_path / "o", dry_run=True, executor=fake,
               console=Console(file=open(tmp_path / "log", "w"), width=200))
    assert fake.calls == [] and not (tmp_path / "o" / "results.json").exists()
    text = (tmp_path / "log").read_text()
    assert "trainer.max_steps=100" in text and "hydra.run.dir=" in text


def test_cli_list_and_dry_run(capsys, monkeypatch, mini_recipe, tmp_path):
    monkeypatch.setenv("FA_RECIPES_DIR", str(mini_recipe.path.parent))
    assert cli.main(["list"]) == 0
    assert "mini" in capsys.readouterr().out
    assert cli.main(["run", "mini", "--scale", "smoke", "--dry-run",
                     "--out", str(tmp_path / "o")]) == 0
    assert cli.main(["run", "nope", "--scale", "smoke"]) == 2
    assert "known recipes: mini" in capsys.readouterr().err
    assert cli.main(["run", "mini", "--scale", "gpu", "--only", "nope", "--dry-run"]) == 2


def test_in_process_executor_records_a_config_error(tmp_path):
    """A real executor, no training: Hydra refuses an unknown experiment; the run is 'failed'."""
    from fa_train.repro.recipe import Run
    from fa_train.repro.runner import InProcessExecutor
    run = Run(name="x", kind="train", experiment="gpt2/does-not-exist")
    (tmp_path / "x").mkdir()
    outcome = InProcessExecutor()(run, tmp_path / "x", None)
    assert outcome.returncode == 1 and "does-not-exist" in outcome.output
    assert classify(outcome, {}, False)[0] == "failed"
    assert "does-not-exist" in (tmp_path / "x" / "run.log").read_text()


class SlowExecutor(FakeExecutor):
    """Counts how many runs are inside the executor at once."""

    def __init__(self, behaviour=None):
        super().__init__(behaviour)
        self.inside = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, run, run_dir, timeout_s):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.2)
        try:
            return super().__call__(run, run_dir, timeout_s)
        finally:
            with self.lock:
                self.inside -= 1


def test_jobs_run_concurrently_and_record_every_run(mini_recipe, tmp_path):
    slow = SlowExecutor()
    data = run_recipe(mini_recipe, "smoke", tmp_path / "out", executor=slow, console=quiet(),
                      jobs=3)
    assert slow.most == 3 and sorted(slow.calls) == ["base", "bench", "fast"]
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted(on_disk["runs"]) == ["base", "bench", "fast"] and on_disk == data
    assert {e["concurrent_runs"] for e in on_disk["runs"].values()} == {3}
    assert {e["shared_from_step"] for e in on_disk["runs"].values()} == {0}   # timings not their own
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        run_recipe(mini_recipe, "smoke", tmp_path / "x", executor=slow, console=quiet(), jobs=0)


def test_invocations_sharing_a_folder_keep_each_others_runs(mini_recipe, tmp_path):
    """One invocation per GPU on one folder: the one that started first and finishes last must
    not write back its stale copy of results.json over the other's run."""
    out, b_done = tmp_path / "out", threading.Event()

    class WaitsForB(FakeExecutor):
        def __call__(self, run, run_dir, timeout_s):
            assert b_done.wait(10)
            return super().__call__(run, run_dir, timeout_s)

    a = threading.Thread(target=run_recipe, args=(mini_recipe, "smoke", out),
                         kwargs=dict(only="base", executor=WaitsForB(), console=quiet()))
    a.start()
    time.sleep(0.2)   # A has read results.json and is running
    run_recipe(mini_recipe, "smoke", out, only="fast", executor=FakeExecutor(), console=quiet())
    b_done.set()
    a.join()
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert sorted(runs) == ["base", "fast"] and {e["status"] for e in runs.values()} == {"ok"}


class GpuRecorder(FakeExecutor):
    """Notes each run's CUDA_VISIBLE_DEVICES and which GPUs are busy at once."""

    def __init__(self):
        super().__init__()
        self.lock, self.busy, self.seen, self.clash = threading.Lock(), set(), {}, False

    def __call__(self, run, run_dir, timeout_s):
        gpu = run.env["CUDA_VISIBLE_DEVICES"]
        with self.lock:
            self.clash |= gpu in self.busy
            self.busy.add(gpu)
            self.seen[run.name] = gpu
        time.sleep(0.05)
        with self.lock:
            self.busy.discard(gpu)
        return super().__call__(run, run_dir, timeout_s)


def test_gpus_run_one_run_per_gpu_at_a_time(mini_recipe, tmp_path):
    gpus = GpuRecorder()
    data = run_recipe(mini_recipe, "smoke", tmp_path / "out", executor=gpus, console=quiet(),
                      gpus=["0", "1"])
    assert set(gpus.seen) == {"base", "fast", "bench"} and not gpus.clash
    assert set(gpus.seen.values()) <= {"0", "1"}
    assert {n: e["gpu"] for n, e in data["runs"].items()} == gpus.seen
    assert all(e["concurrent_runs"] == 2 for e in data["runs"].values())
    assert all(e["shared_from_step"] is None for e in data["runs"].values())   # alone on its GPU


def test_a_run_continued_beside_others_records_the_step_its_gpu_became_shared(mini_recipe, tmp_path):
    out = tmp_path / "out"
    run_recipe(mini_recipe, "smoke", out, only="base", executor=FakeExecutor({"base": "pause"}),
               console=quiet())
    data = run_recipe(mini_recipe, "smoke", out, only="base", console=quiet(), jobs=2,
                      executor=FakeExecutor({"base": "pause"}))
    assert data["runs"]["base"]["shared_from_step"] is None   # --jobs, but nothing ran beside it
    data = run_recipe(mini_recipe, "smoke", out, executor=SlowExecutor({"base": "pause"}),
                      console=quiet(), jobs=2)
    assert data["runs"]["base"]["shared_from_step"] == 1    # the step it had reached alone
    data = run_recipe(mini_recipe, "smoke", out, only="base", executor=FakeExecutor(), console=quiet())
    assert data["runs"]["base"]["status"] == "ok"
    assert data["runs"]["base"]["shared_from_step"] == 1    # alone again: the mark stays


class NeighbourSeen(FakeExecutor):
    """A run whose own watch saw another job on its GPU from the given step."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def __call__(self, run, run_dir, timeout_s):
        outcome = super().__call__(run, run_dir, timeout_s)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        (run_dir / "metrics.json").write_text(json.dumps({**metrics, "gpu_shared_from_step": self.step}))
        return outcome


def test_a_job_the_run_saw_on_its_gpu_marks_it_shared_from_that_step(mini_recipe, tmp_path):
    out = tmp_path / "out"
    data = run_recipe(mini_recipe, "smoke", out, only="base", executor=NeighbourSeen(7),
                      console=quiet(), gpus=["0"])
    assert data["runs"]["base"]["shared_from_step"] == 7
    data = run_recipe(mini_recipe, "smoke", out, only="fast", executor=NeighbourSeen(None),
                      console=quiet(), gpus=["0"])
    assert data["runs"]["fast"]["shared_from_step"] is None   # its watch saw the GPU alone


@pytest.mark.parametrize("kw, message", [
    ({"gpus": ["0", "0"]}, "distinct device numbers"), ({"gpus": ["a"]}, "distinct device numbers"),
    ({"gpus": ["0", "1"], "jobs": 2}, "not both"),
])
def test_bad_gpus_are_named(mini_recipe, tmp_path, kw, message):
    with pytest.raises(RecipeError, match=message):
        run_recipe(mini_recipe, "smoke", tmp_path / "out", executor=FakeExecutor(), console=quiet(), **kw)


def test_gpus_need_subprocesses(mini_recipe, tmp_path):
    from fa_train.repro.runner import InProcessExecutor
    with pytest.raises(RecipeError, match="leave out --in-process"):
        run_recipe(mini_recipe, "smoke", tmp_path / "out", executor=InProcessExecutor(),
                   console=quiet(), gpus=["0"])


def test_subprocess_runs_get_their_gpu(tmp_path):
    from fa_train.repro.recipe import Run
    from fa_train.repro.runner import SubprocessExecutor
    run = Run(name="r", kind="bench", subcommand="attention", env={"CUDA_VISIBLE_DEVICES": "3"})
    run.command = lambda d: [sys.executable, "-c",
                             "import os; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'])"]
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    assert SubprocessExecutor()(run, run_dir, 30).returncode == 0
    assert "gpu 3" in (run_dir / "run.log").read_text()


def test_prepare_fills_the_data_caches_the_runs_then_reuse(tmp_path, monkeypatch, capsys):
    """`fa-repro prepare` generates a run's Pathfinder set into the cache its config names, and
    nothing else; the run's own data module then finds it ready."""
    from fa_train.repro.recipe import load_recipe
    from fa_train.repro.runner import compose_train_config, prepare_run_data
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    monkeypatch.setenv("FA_TRAIN_CACHE", str(tmp_path / "cache"))
    recipe = load_recipe("table6_pathx")
    assert cli.main(["prepare", "table6_pathx", "--scale", "smoke", "--only", "path64-standard"]) == 0
    assert "path64-standard: data ready in" in capsys.readouterr().out
    shards = sorted(p.relative_to(tmp_path) for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert shards and not (tmp_path / "outputs").exists()
    (run,) = recipe.runs("smoke", only=["path64-standard"])
    try:
        dm = instantiate(compose_train_config(run, tmp_path / "run").data, _convert_="all")
    finally:
        GlobalHydra.instance().clear()
    from fa_train.data.lra import datamodule
    monkeypatch.setattr(datamodule.pf, "generate_pathfinder", lambda *a, **k: pytest.fail("generated again"))
    dm.prepare_data()
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "cache").rglob("*") if p.is_file()) == shards
    assert prepare_run_data(recipe, "smoke", only=["path64-standard"], echo=lambda _: None) == ["path64-standard"]
    assert cli.main(["prepare", "table6_pathx", "--scale", "smoke", "--only", "nope"]) == 2
