"""Run a recipe at one scale: every run as a subprocess (or in-process), resumable, with results.

Layout of an output folder (default ``reports/<recipe>/<scale>/``)::

    results.json          one entry per run: status, metrics, timings, command, error tail
    <run>/                the run's own folder: fa-train's run dir (metrics.json, metrics.csv,
                          loss_curve.png) or fa-bench's --out folder (JSON/CSV), plus run.log

Statuses: ``ok``, ``oom`` (a result, not a crash: the run did not fit), ``paused`` (a training run
stopped by ``--pause-after``, its checkpoint kept), ``failed``, ``timeout``, ``dry-run``. A run whose
entry says ``ok`` and whose result file still exists is skipped when the recipe is run again; a
paused run continues from its checkpoint (``resume=<run folder>``); every other status is retried.

A run with ``init_from: SOURCE`` (transfer, e.g. Path-64 -> Path-X) starts from SOURCE's final
weights (``init_from=<out>/SOURCE``): it runs after SOURCE, whose checkpoint is kept until every
run that starts from it is done, and waits (no entry) while SOURCE is not ok.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

import yaml

from fa_train.repro.metrics_csv import compress_if_finished
from fa_train.repro.recipe import Recipe, RecipeError, Run
from fa_train.utils.run_dir import release_run_dir

RESULTS_FILE = "results.json"
LOG_FILE = "run.log"
OOM_PATTERNS = re.compile(
    r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|Cannot allocate memory|"
    r"DefaultCPUAllocator: can't allocate", re.IGNORECASE)
TAIL_CHARS = 4000
END_MARGIN_S = 45.0      # --time-budget: a paused run's final checkpoint and exit
MIN_START_S = 150.0      # --time-budget: a run starts only with this much time left
TRAIN_CONFIG_NAME = "config"   # configs/config.yaml, as fa_train.train.main uses


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def default_out_dir(recipe: Recipe, scale: str) -> Path:
    return Path("reports") / recipe.name / scale


# ------------------------------------------------------------------------------------------------
# Result files of one run
# ------------------------------------------------------------------------------------------------
def load_json(path: Path) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def result_files(run: Run, run_dir: Path) -> list[Path]:
    """The files a finished run leaves: metrics.json for train, the JSON files for bench."""
    if run.kind == "train":
        return [p for p in [run_dir / "metrics.json"] if p.exists()]
    return sorted(p for p in run_dir.glob("*.json") if p.is_file())


def collect_metrics(run: Run, run_dir: Path) -> dict[str, Any]:
    """What the run's result files say: metrics.json as is (train), or {file stem: JSON} (bench)."""
    if run.kind == "train":
        data = load_json(run_dir / "metrics.json")
        return data if isinstance(data, dict) else {}
    return {p.stem: load_json(p) for p in result_files(run, run_dir)}


# ------------------------------------------------------------------------------------------------
# Executors: how a run is executed. Tests pass a fake one.
# ------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    returncode: int
    output: str = ""          # the tail of stdout+stderr (or of the exception)
    timed_out: bool = False


class Executor(Protocol):
    def __call__(self, run: Run, run_dir: Path, timeout_s: float | None) -> Outcome: ...


class SubprocessExecutor:
    """`fa-train ... hydra.run.dir=<run_dir>` / `fa-bench <sub> --out <run_dir>` in a child
    process; its output goes to <run_dir>/run.log. An OOM kills only the child."""

    def __init__(self, echo: Callable[[str], None] | None = None):
        self.echo = echo

    def __call__(self, run: Run, run_dir: Path, timeout_s: float | None) -> Outcome:
        cmd = run.command(run_dir)
        log = run_dir / LOG_FILE
        env = dict(os.environ, PYTHONUNBUFFERED="1", **run.env)
        with open(log, "w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            try:
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
            except OSError as exc:
                return Outcome(returncode=127, output=f"{type(exc).__name__}: {exc}")
            try:
                rc = proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc, timed_out = -9, True
        return Outcome(returncode=rc, output=_tail(log), timed_out=timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # the child's own session: only what it started
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _tail(path: Path, n: int = TAIL_CHARS) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-n:]


class InProcessExecutor:
    """Runs in this process: train(cfg) composed by Hydra, or fa-bench's main(argv).

    Saves the interpreter start and imports of each subprocess (the CPU smoke test runs every
    recipe this way; on a GPU, sweeps of short runs). Memory is released between runs, but there is
    no timeout and no isolation: a run that corrupts the CUDA context takes the rest with it.
    Runs of several processes (DDP, FSDP) go through SubprocessExecutor: Lightning starts the
    other processes by re-running the command line, which must be `fa-train`'s own."""

    def __call__(self, run: Run, run_dir: Path, timeout_s: float | None) -> Outcome:
        if _several_processes(run):
            return SubprocessExecutor()(run, run_dir, timeout_s)
        import contextlib
        import io
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                if run.kind == "train":
                    _train_in_process(run, run_dir)
                else:
                    from fa_train.bench.cli import main as bench_main
                    rc = bench_main([str(run.subcommand), "--out", str(run_dir), *run.bench_argv()])
                    if rc not in (None, 0):
                        return Outcome(returncode=int(rc), output=buf.getvalue()[-TAIL_CHARS:])
        except SystemExit as exc:  # argparse errors, explicit exits
            code = exc.code if isinstance(exc.code, int) else 1
            if code:
                buf.write(f"SystemExit: {exc.code}\n")
                return Outcome(returncode=code, output=buf.getvalue()[-TAIL_CHARS:])
        except BaseException as exc:  # noqa: BLE001 - every failure is a recorded result
            if isinstance(exc, KeyboardInterrupt):
                raise
            buf.write(traceback.format_exc())
            return Outcome(returncode=1, output=buf.getvalue()[-TAIL_CHARS:])
        finally:
            (run_dir / LOG_FILE).write_text(buf.getvalue())
            _release_memory()
        return Outcome(returncode=0, output=buf.getvalue()[-TAIL_CHARS:])


def _several_processes(run: Run) -> bool:
    """A training run whose trainer starts one process per device."""
    o = run.overrides
    return run.kind == "train" and (o.get("trainer") in ("ddp", "fsdp")
                                    or o.get("trainer.devices", 1) not in (1, "1", None))


def _release_memory() -> None:
    """Free what a finished in-process run left (reference cycles, cached GPU blocks)."""
    import gc
    gc.collect()
    torch = sys.modules.get("torch")  # never imported just for this
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def compose_train_config(run: Run, run_dir: Path | str):
    """The config `fa-train <run's overrides> hydra.run.dir=<run_dir>` would run, composed here.

    HydraConfig is set up as @hydra.main would (paths.output_dir = run_dir); the caller clears
    GlobalHydra when done. Raises Hydra's own errors for unknown experiments or keys."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from fa_train import train as train_mod

    os.environ.setdefault("FA_TRAIN_ROOT", str(train_mod.REPO_ROOT))
    GlobalHydra.instance().clear()
    overrides = run.hydra_overrides() + [f"hydra.run.dir={run_dir}"]
    initialize_config_dir(config_dir=str(train_mod.CONFIG_DIR), version_base="1.3")
    cfg = compose(config_name=TRAIN_CONFIG_NAME, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.name = run.name
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):      # the job's config carries no `hydra` node, as under @hydra.main
        del cfg["hydra"]
    return cfg


def prepare_run_data(recipe: Recipe, scale: str, only: str | list[str] | None = None,
                     echo: Callable[[str], None] = print) -> list[str]:
    """Prepare the data of each training run of `recipe` at `scale` (generate, download, tokenize)
    without training it; returns the runs prepared. Data caches are keyed by their parameters, so
    the runs reuse them later: e.g. a long generation started in the background on a GPU host
    while another recipe trains."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    prepared = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in recipe.runs(scale, only=only):
            if run.kind != "train":
                continue
            start = time.monotonic()
            try:
                instantiate(compose_train_config(run, Path(tmp) / run.name).data, _convert_="all").prepare_data()
            finally:
                GlobalHydra.instance().clear()
            echo(f"{run.name}: data ready in {time.monotonic() - start:.0f} s")
            prepared.append(run.name)
    return prepared


def _train_in_process(run: Run, run_dir: Path) -> None:
    from hydra.core.global_hydra import GlobalHydra

    from fa_train import train as train_mod
    try:
        cfg = compose_train_config(run, run_dir)
        train_mod.train(cfg)
    finally:
        GlobalHydra.instance().clear()


# ------------------------------------------------------------------------------------------------
# Environment and classification
# ------------------------------------------------------------------------------------------------
def host_info() -> dict[str, Any]:
    """Hostname, GPU names (nvidia-smi, no torch import), CPU count, Python: for the report."""
    gpus: list[str] = []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0:
            gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    return {"hostname": platform.node(), "gpus": gpus or ["none (CPU only)"],
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def _has_gpu(host: dict[str, Any]) -> bool:
    return any(not g.startswith("none") for g in host.get("gpus") or [])


STOPPED_EARLY = ("diverged", "stalled")   # training stopped where it could not go on: a result


def stopped_text(entry: dict[str, Any]) -> str:
    """'diverged at step N' / 'stalled at step N' for a run stopped early ('diverged' ... when
    the step is unknown)."""
    status = entry.get("status")
    step = (entry.get("metrics") or {}).get(f"{status}_at_step")
    return status if step is None else f"{status} at step {step:,}"


def classify(outcome: Outcome, metrics: dict[str, Any], has_result: bool) -> tuple[str, str | None]:
    """(status, error) of a finished run."""
    reported = str(metrics.get("status", "")).lower() if isinstance(metrics, dict) else ""
    if reported == "oom" or (outcome.returncode != 0 and OOM_PATTERNS.search(outcome.output or "")):
        return "oom", _error_line(outcome.output) or "out of memory"
    if outcome.timed_out:
        return "timeout", "timed out"
    if outcome.returncode in (-9, 137) and not has_result:
        return "oom", "killed (SIGKILL: most likely the host ran out of memory)"
    if outcome.returncode < 0:   # stopped from outside: its last line says nothing about why
        stopped = f"stopped by {signal_name(-outcome.returncode)}"
        # metrics.json is the run's last write (after its checkpoint): the run itself finished
        if reported in ("ok", "paused"):
            return reported, f"{stopped} on its way out, after writing its results"
        said = f" after writing metrics.json with status {reported!r}" if reported else ""
        return "failed", stopped + said
    if outcome.returncode != 0:
        return "failed", _error_line(outcome.output) or f"exit status {outcome.returncode}"
    if reported == "paused":
        return "paused", None
    if reported in STOPPED_EARLY:
        return reported, metrics.get("error") or f"training {reported}"
    if reported and reported != "ok":
        return ("failed", f"metrics.json status {reported!r}")
    if not has_result:
        return "failed", "finished but wrote no result file"
    return "ok", None


def signal_name(number: int) -> str:
    """SIGTERM for 15; 'signal N' for a number that names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _error_line(text: str) -> str | None:
    """The most telling line of a failure's output (the last exception line)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|error:)", ln) or "out of memory" in ln.lower():
            return ln[:500]
    return lines[-1][:500] if lines else None


# ------------------------------------------------------------------------------------------------
# The runner
# ------------------------------------------------------------------------------------------------
class Results:
    """results.json of one output folder, rewritten after every run (safe to interrupt)."""

    def __init__(self, out_dir: Path, recipe: Recipe, scale: str):
        self.path = out_dir / RESULTS_FILE
        data = load_json(self.path) or {}
        self.data = {"recipe": recipe.name, "recipe_file": str(recipe.path), "scale": scale,
                     "created": data.get("created", now_iso()), "updated": now_iso(),
                     "host": data.get("host"), "runs": data.get("runs", {})}

    def run(self, name: str) -> dict[str, Any] | None:
        return self.data["runs"].get(name)

    def record(self, name: str, entry: dict[str, Any]) -> None:
        """Write one run's entry. Other invocations may share the folder (one per GPU), so the
        file is re-read under a lock and only this entry replaced: no one's runs are lost."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            on_disk = load_json(self.path) or {}
            self.data["runs"] = {**self.data["runs"], **on_disk.get("runs", {}), name: entry}
            self.data["updated"] = now_iso()
            tmp = self.path.with_suffix(f".json.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=2, sort_keys=False, default=str) + "\n")
            tmp.replace(self.path)
        finally:
            os.close(folder)   # releases the lock


def is_done(entry: dict[str, Any] | None, run: Run, run_dir: Path) -> bool:
    """A run is done when results.json says ok (or diverged or stalled: a result too; --force
    reruns it) and its result file still exists."""
    return (bool(entry) and entry.get("status") in ("ok", *STOPPED_EARLY)
            and bool(result_files(run, run_dir)))


RELEASED = "{}: checkpoint deleted (every run that starts from it ended ok)"


def release_sources(recipe: Recipe, scale: str, out: Path, results: "Results") -> list[str]:
    """Delete the checkpoints kept for transfers (`init_from`) once the source is done and every
    run of `scale` that starts from it ended ok (one that diverged or stalled is a result, but
    the one most likely to run again from the same weights); return the sources released."""
    runs = recipe.runs(scale)
    released = []
    for source in sorted({r.init_from for r in runs if r.init_from}):
        ckpt = out / source / "checkpoints"
        family = [r for r in runs if source in (r.name, r.init_from)]
        if ckpt.is_dir() and all(is_done(results.run(r.name), r, out / r.name)
                                 and (r.name == source or results.run(r.name)["status"] == "ok")
                                 for r in family):
            shutil.rmtree(ckpt)
            released.append(source)
    return released


def keep_final_weights(ckpt_dir: Path) -> None:
    """Reduce a finished source run's checkpoints/ to what the runs that start from it read: its
    final weights, as last.ckpt's ``state_dict`` (the optimizer and loop state only serve resuming,
    and triple a small model's checkpoint)."""
    import torch
    last = ckpt_dir / "last.ckpt"
    if not last.is_file():
        return
    state = torch.load(last, map_location="cpu", weights_only=False)
    slim = ckpt_dir / "last.ckpt.tmp"
    torch.save({"state_dict": state.get("state_dict", state)}, slim)
    for path in ckpt_dir.iterdir():
        if path != slim:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    os.replace(slim, last)


def resumable(entry: dict[str, Any] | None, run: Run, run_dir: Path) -> bool:
    """A paused training run whose checkpoint is still in its folder."""
    return (run.kind == "train" and bool(entry) and entry.get("status") == "paused"
            and (run_dir / "checkpoints" / "last.ckpt").is_file())


def planned_steps(run_dir: Path) -> int | None:
    """The optimizer steps a training run is set to run (trainer.max_steps of the config.yaml it
    saved in `run_dir`); None when unknown."""
    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    total = ((config or {}).get("trainer") or {}).get("max_steps")
    return total if isinstance(total, int) and total > 0 else None


def continue_first(runs: list[Run], results: "Results", out: Path) -> list[Run]:
    """`runs` with the paused runs that keep their checkpoint first, those with the smallest share
    of their steps left first (within a time budget they finish rather than wait behind long
    runs); the others keep recipe order."""
    def share_left(run: Run) -> float:
        total = planned_steps(out / run.name)
        step = (results.run(run.name).get("metrics") or {}).get("global_step")
        return 1 - step / total if total and isinstance(step, int) else 1.0

    paused = sorted((r for r in runs if resumable(results.run(r.name), r, out / r.name)),
                    key=share_left)
    names = {r.name for r in paused}
    return paused + [r for r in runs if r.name not in names]


def with_session_overrides(run: Run, run_dir: Path, resuming: bool, pause_after: float | None,
                           pause_at: float | None = None) -> Run:
    """The run with this invocation's own keys: ``init_from`` (its source run's folder beside
    `run_dir`), ``resume`` (continue the paused run in `run_dir`), ``pause_after`` (minutes) and
    ``pause_at`` (Unix time); other kinds of run are returned unchanged."""
    if run.kind != "train":
        return run
    extra: dict[str, Any] = {}
    if run.init_from:
        extra["init_from"] = str(run_dir.parent / run.init_from)
    if resuming:
        extra["resume"] = str(run_dir)
    if pause_after is not None:
        extra["pause_after"] = pause_after
    if pause_at is not None:
        extra["pause_at"] = pause_at
    return replace(run, overrides={**run.overrides, **extra}) if extra else run


def recorded_elsewhere(recipe: Recipe, scale: str, out: Path, runs: list[Run]) -> str:
    """When `out` has no results yet but the recipe's default folder records some of `runs`:
    what it records and how to use it ('' otherwise). Those runs would start over in `out`."""
    default = default_out_dir(recipe, scale).resolve()
    if out == default or (out / RESULTS_FILE).exists():
        return ""
    recorded = (load_json(default / RESULTS_FILE) or {}).get("runs", {})
    statuses = [recorded[r.name].get("status") for r in runs if r.name in recorded]
    if not statuses:
        return ""
    paused = statuses.count("paused")
    return (f"{default} records {len(statuses)} of these runs"
            + (f" ({paused} paused)" if paused else "")
            + f": copy that folder to {out} first to skip or continue them")


def source_ready(results: "Results", run: Run, out: Path) -> str:
    """Why `run` cannot start yet ('' when it can): its init_from source must be ok with its
    checkpoint kept."""
    if not run.init_from:
        return ""
    entry = results.run(run.init_from)
    status = entry.get("status") if entry else "not run"
    if status != "ok":
        return f"waits for {run.init_from} ({status})"
    if not (out / run.init_from / "checkpoints" / "last.ckpt").is_file():
        return f"waits for {run.init_from} (ok, but its checkpoint is gone: run it again with --force)"
    return ""


def run_in_order(runs: list[Run], start: Callable[[Run], None], jobs: int) -> None:
    """Run `runs` with `jobs` at a time: each free slot takes the first run in recipe order
    whose source (init_from) is not still waiting or running in this invocation, so a transfer
    starts as soon as its own source ends, not after every run before it."""
    if jobs == 1:   # recipe order puts sources first
        for run in runs:
            start(run)
        return
    pending, running = list(runs), {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            busy = {r.name for r in pending} | {r.name for r in running.values()}
            for run in [r for r in pending if r.init_from not in busy][:jobs - len(running)]:
                pending.remove(run)
                running[pool.submit(start, run)] = run
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                del running[future]
                future.result()


def run_recipe(recipe: Recipe, scale: str, out_dir: Path | str | None = None,
               only: str | list[str] | None = None, dry_run: bool = False,
               executor: Executor | None = None, console=None, force: bool = False,
               keep_checkpoints: bool = False, jobs: int = 1,
               pause_after: float | None = None, gpus: list[str] | None = None,
               time_budget: float | None = None) -> dict[str, Any]:
    """Run every run of `recipe` at `scale` that is not already done; return results.json's data.

    `jobs` > 1 runs that many at once (subprocesses sharing the machine and its GPU: for
    accuracy studies of small models, not for timings; each entry records `concurrent_runs`).
    `gpus` (device ids) runs one run per GPU at once, each alone on its GPU
    (CUDA_VISIBLE_DEVICES; the entry records `gpu`): its timings are its own.

    Training checkpoints (checkpoints/ in each run folder; GBs at the gpu scale) are deleted
    after each run unless `keep_checkpoints` or another run starts from them (`init_from`; then
    only the final weights stay, until those runs are done: `keep_final_weights`,
    `release_sources`): a recipe keeps metrics, not weights.

    `pause_after` (minutes) pauses each training run after that much wall time; the paused run
    keeps its checkpoint, and running the recipe again continues it where it stopped, before
    the runs not yet started (`continue_first`).

    `time_budget` (minutes) ends the whole invocation in time (a batch job's time limit): each
    training run pauses (``pause_at``) END_MARGIN_S before the end, other runs get the time left
    as their timeout, and no run starts with under MIN_START_S left (the next invocation starts
    it)."""
    from rich.console import Console

    console = console or Console(stderr=True)
    if jobs < 1:
        raise RecipeError(f"jobs must be at least 1, got {jobs}")
    if gpus is not None:
        if not gpus or len(set(gpus)) != len(gpus) or not all(str(g).isdigit() for g in gpus):
            raise RecipeError(f"gpus must be distinct device numbers, e.g. 0,1; got {gpus}")
        if jobs != 1:
            raise RecipeError("give --jobs or --gpus, not both (--gpus runs one run per GPU)")
        if isinstance(executor, InProcessExecutor):
            raise RecipeError("--gpus starts each run in its own process: leave out --in-process")
        jobs = len(gpus)
    if time_budget is not None and not time_budget > 0:
        raise RecipeError(f"time_budget must be a positive number of minutes, got {time_budget}")
    deadline = time.monotonic() + time_budget * 60 if time_budget else None
    free = queue.SimpleQueue()   # GPUs not taken by a running run
    for g in gpus or []:
        free.put(str(g))
    out = (Path(out_dir) if out_dir else default_out_dir(recipe, scale)).resolve()
    runs = recipe.runs(scale, only=only)
    results = Results(out, recipe, scale)
    if not force:
        runs = continue_first(runs, results, out)
    executor = executor or SubprocessExecutor()
    sc = recipe.scale(scale)
    console.print(f"[bold]{recipe.name}[/] — {recipe.title}\n"
                  f"scale [cyan]{scale}[/] ({sc['hardware']}); {len(runs)} run(s) -> {out}")
    elsewhere = recorded_elsewhere(recipe, scale, out, runs)
    if elsewhere:
        console.print(f"note: {out} starts empty, but {elsewhere}", highlight=False)
    if dry_run:
        for i, run in enumerate(runs, 1):
            planned = with_session_overrides(run, out / run.name, False, pause_after)
            cmd = " ".join(planned.command(out / run.name))
            done = is_done(results.run(run.name), run, out / run.name)
            console.print(f"[{i}/{len(runs)}] {run.name}{' (done, would skip)' if done else ''}\n"
                          f"    {cmd}", highlight=False, soft_wrap=True)
        return results.data
    results.data["host"] = host_info()
    if (scale == "smoke" or not _has_gpu(results.data["host"])) and \
            "TRITON_INTERPRET" not in os.environ:
        # The smoke scale runs on CPU, where Triton kernels (flash, blocksparse) run under the
        # interpreter. Set before the kernels are imported; child processes inherit it.
        os.environ["TRITON_INTERPRET"] = "1"
        console.print("CPU run: TRITON_INTERPRET=1 (Triton kernels run interpreted)")
    counts: dict[str, int] = {}
    lock = threading.Lock()   # results.json and the counts are shared by concurrent runs
    sharing: set[str] = set()     # runs on this machine's GPU now, and those that overlapped
    overlapped: set[str] = set()  # another there (--jobs without --gpus)
    sources = {r.init_from for r in recipe.runs(scale) if r.init_from}   # checkpoints kept for them

    def one(i: int, run: Run) -> None:
        run_dir = out / run.name
        prefix = f"[{i}/{len(runs)}] {run.name}"
        with lock:
            prior = results.run(run.name)
            if not force and is_done(prior, run, run_dir):
                if prior.get("labels") != run.labels:  # labels only describe a run: follow the recipe
                    results.record(run.name, dict(prior, labels=run.labels))
                console.print(f"{prefix}: [green]{prior['status']}[/] (done before, skipped)")
                counts["skipped"] = counts.get("skipped", 0) + 1
                return
        waiting = source_ready(results, run, out)
        if waiting:
            console.print(f"{prefix}: {waiting}", highlight=False)
            with lock:
                counts["waiting"] = counts.get("waiting", 0) + 1
            return
        resuming = resumable(prior, run, run_dir) and not force
        gpu = free.get() if gpus else None
        timeout_s, pause_at = run.timeout_s, None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < MIN_START_S:
                if gpu is not None:
                    free.put(gpu)
                console.print(f"{prefix}: not started (time budget spent)", highlight=False)
                with lock:
                    counts["not started"] = counts.get("not started", 0) + 1
                return
            timeout_s = min(timeout_s or left, left)
            pause_at = round(time.time() + left - END_MARGIN_S)
        run = with_session_overrides(run, run_dir, resuming, pause_after, pause_at)
        if gpu is not None:
            run = replace(run, env={**run.env, "CUDA_VISIBLE_DEVICES": gpu})
        if run.kind == "train" and not resuming:   # a fresh start keeps nothing of a run before
            shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in result_files(run, run_dir):   # a retried run must not pass on old files
            stale.unlink()
        release_run_dir(run_dir)                   # the retry takes the same folder
        started, t0 = now_iso(), time.perf_counter()
        if resuming:
            console.print(f"{prefix}: continuing from its checkpoint", highlight=False)
        elif prior and prior.get("status") == "paused" and not force \
                and (prior.get("metrics") or {}).get("global_step"):
            console.print(f"{prefix}: paused before, but its checkpoint is gone: starting again "
                          f"from step 0", highlight=False)
        if jobs > 1 and gpu is None:
            with lock:
                sharing.add(run.name)
                if len(sharing) > 1:
                    overlapped.update(sharing)
        try:
            if jobs > 1:
                console.print(f"{prefix}: started" + (f" on GPU {gpu}" if gpu else ""),
                              highlight=False)
                outcome = executor(run, run_dir, timeout_s)
            else:
                with console.status(f"{prefix}: running ({run.kind} "
                                    f"{run.experiment or run.subcommand})…"):
                    outcome = executor(run, run_dir, timeout_s)
        finally:
            if gpu is not None:
                free.put(gpu)
            with lock:
                sharing.discard(run.name)
        duration = time.perf_counter() - t0
        metrics = collect_metrics(run, run_dir)
        status, error = classify(outcome, metrics, bool(result_files(run, run_dir)))
        compress_if_finished(run_dir, run.kind, status)
        if not keep_checkpoints and status != "paused":
            if run.name not in sources:
                shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
            elif status == "ok":
                keep_final_weights(run_dir / "checkpoints")
        if resuming:   # one run in several stretches: its first start, the sum of their durations
            started = prior.get("started", started)
            duration += float(prior.get("duration_s") or 0.0)
        entry = {"status": status, "kind": run.kind, "experiment": run.experiment,
                 "subcommand": run.subcommand, "overrides": run.overrides, "args": run.args,
                 "labels": run.labels, "command": run.command(run_dir), "run_dir": run.name,
                 "executor": type(executor).__name__, "started": started, "finished": now_iso(),
                 "duration_s": round(duration, 2), "concurrent_runs": jobs,
                 "stretches": int(prior.get("stretches", 1)) + 1 if resuming else 1,
                 "returncode": outcome.returncode, "error": error, "metrics": metrics}
        if gpu is not None:
            entry["gpu"] = gpu
        shared = shared_from_step(prior) if resuming else None
        if shared is None and run.name in overlapped:   # its timings are not its own from here
            shared = int((prior.get("metrics") or {}).get("global_step") or 0) if resuming else 0
        seen = metrics.get("gpu_shared_from_step")   # another job its own watch saw
        if isinstance(seen, int):
            shared = seen if shared is None else min(shared, seen)
        entry["shared_from_step"] = shared
        if status != "ok":
            entry["output_tail"] = outcome.output[-TAIL_CHARS:]
        with lock:
            results.record(run.name, entry)
            counts[status] = counts.get(status, 0) + 1
        colour = "green" if status == "ok" else \
            "yellow" if status in ("oom", "paused", *STOPPED_EARLY) else "red"
        console.print(f"{prefix}: [{colour}]{status}[/] in {duration:.1f} s"
                      + (f" — {error}" if error else ""), highlight=False)

    number = {run.name: i for i, run in enumerate(runs, 1)}
    run_in_order(runs, lambda run: one(number[run.name], run), jobs)
    if not keep_checkpoints:
        for source in release_sources(recipe, scale, out, results):
            console.print(RELEASED.format(source), highlight=False)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do"
    console.print(f"[bold]{recipe.name}/{scale}[/]: {summary}; results in {results.path}")
    return results.data


def shared_from_step(entry: dict[str, Any]) -> int | None:
    """The step from which a run trained while other runs shared its GPU (fa-repro run --jobs, or
    another job that the run's own watch saw: fa_train.callbacks.gpu_neighbours); None when it
    always had its device to itself. Entries from before the step was recorded, of runs started
    with --jobs and without --gpus: 0."""
    if "shared_from_step" in entry:
        return entry["shared_from_step"]
    return 0 if (entry.get("concurrent_runs") or 1) > 1 and "gpu" not in entry else None


def failed_runs(data: dict[str, Any]) -> list[str]:
    """Runs whose status is not ok, oom, diverged or stalled (legitimate results) or paused (to be
    continued)."""
    return [n for n, e in data.get("runs", {}).items()
            if e.get("status") not in ("ok", "oom", "paused", *STOPPED_EARLY)]


def paused_runs(data: dict[str, Any]) -> list[str]:
    """Training runs paused by `pause_after`, which running the recipe again continues."""
    return [n for n, e in data.get("runs", {}).items() if e.get("status") == "paused"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `fa-repro run`")
