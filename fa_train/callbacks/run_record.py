"""``metrics.json``: what a run was and how it ended, written whether it succeeded or not.

Keys: status ("running" | "ok" | "paused" | "diverged" | "stalled" | "oom" | "failed"), error (and
traceback when failed), experiment, git_commit, output_dir, resumed_from; from `describe`:
attention (resolved), model, n_params, seq_len, batch_size, global_batch_size,
accumulate_grad_batches, devices, precision; at the end: global_step, epoch, wall_time_s, every
final logged metric (val/loss, val/ppl, val/acc, test/... at the final weights,
test_at_best_val/... at the best validation's), BestWeights' best_val/acc and best_val/step,
PerfMonitor's summary (tokens_per_sec_per_device, mfu, peak_memory_gib, flops_per_token, ...),
tokens_per_sec (per device x world_size) and world_size, GpuNeighbours' gpu_shared_from_step and
gpu_watch, train_loss_first, train_loss_last, loss_start / loss_end (means of the first / last 10
optimizer steps), block-sparse layout statistics, checkpoint, loss_curve, metrics_csv;
diverged_at_step or stalled_at_step when training stopped early (StopOnDivergence, StopOnStall);
paused_before_training when data preparation reached ``pause_at`` first (the previous stretch's
record kept beside it).
"""
from __future__ import annotations

import json
import math
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L

from fa_train.callbacks.best_weights import BestWeights
from fa_train.callbacks.checkpoint import LastCheckpoint
from fa_train.callbacks.divergence import StopOnDivergence
from fa_train.callbacks.gpu_neighbours import GpuNeighbours
from fa_train.callbacks.history import LossHistory
from fa_train.callbacks.pause import PauseAfter
from fa_train.callbacks.perf import PerfMonitor
from fa_train.callbacks.stall import StopOnStall
from fa_train.errors import PreparationPaused, is_oom
from fa_train.utils.checkpoints import atomic_write
from fa_train.utils.provenance import git_commit

SUMMARY_KEYS = ["status", "global_step", "loss_start", "loss_end", "val/loss", "val/ppl",
                "val/acc", "tokens_per_sec_per_device", "mfu", "peak_memory_gib", "wall_time_s"]
LISTED_FILES = ["config.yaml", "metrics.json", "metrics.csv", "checkpoints/last.ckpt",
                "loss_curve.png"]


def _scalar(v: Any) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class RunRecord(L.Callback):
    """Collects the record; `capture` wraps the whole run and writes metrics.json at its end."""

    def __init__(self, out_dir: str | Path, experiment: str | None = None, **fields: Any):
        super().__init__()
        self.out_dir = Path(out_dir)
        self.metrics: dict[str, Any] = {"status": "running", "error": None,
                                        "experiment": experiment, "git_commit": git_commit(),
                                        "output_dir": str(self.out_dir), **fields}
        self.trainer: L.Trainer | None = None
        self._kept_metrics: dict[str, Any] = {}  # callback_metrics of fit and earlier test passes

    def describe(self, trainer: L.Trainer, **fields: Any) -> None:
        self.trainer = trainer
        self.metrics.update(fields)

    def on_fit_end(self, trainer, pl_module):
        self._kept_metrics.update(trainer.callback_metrics)  # trainer.test() replaces them

    def on_test_end(self, trainer, pl_module):
        self._kept_metrics.update(trainer.callback_metrics)  # as does another test pass

    @contextmanager
    def capture(self):
        """Runs the body; records ok / paused / diverged / oom / failed; re-raises everything but
        out-of-memory."""
        t0 = time.time()
        try:
            yield self
            self.metrics["status"] = "paused" if self.paused() else "ok"
            stop = self.stopped_early()
            if stop is not None:
                status, step, reason = stop
                self.metrics.update(status=status, **{f"{status}_at_step": step},
                                    error=f"training {status} by step {step}: {reason}")
        except PreparationPaused as exc:   # before training: the last stretch's record stands
            self.metrics = {**self._previous(), **self.metrics, "status": "paused",
                            "error": None, "paused_before_training": str(exc)}
            print(f"[fa-train] {exc}")
        except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised unless OOM
            if not is_oom(exc):
                self.metrics.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                                    traceback=traceback.format_exc()[-6000:])
                raise
            self.metrics.update(status="oom", error=f"{type(exc).__name__}: {str(exc)[:2000]}")
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        finally:
            self.metrics["wall_time_s"] = round(time.time() - t0, 3)
            self._finish()

    def _previous(self) -> dict[str, Any]:
        """metrics.json as the run's previous stretch left it ({} when there is none)."""
        path = self.out_dir / "metrics.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            return {}

    def paused(self) -> bool:
        """True when training was stopped by `pause_after` (to be resumed), not finished."""
        pause = self._callback(PauseAfter)
        return bool(pause and pause.paused)

    def stopped_early(self) -> tuple[str, int, str] | None:
        """(status, step, reason) when training stopped because it diverged or stalled."""
        diverged, stalled = self._callback(StopOnDivergence), self._callback(StopOnStall)
        if diverged is not None and diverged.diverged_at is not None:
            return "diverged", diverged.diverged_at, diverged.reason
        if stalled is not None and stalled.stalled_at is not None:
            return "stalled", stalled.stalled_at, stalled.reason
        return None

    def _callback(self, cls):
        callbacks = self.trainer.callbacks if self.trainer is not None else []
        return next((c for c in callbacks if isinstance(c, cls)), None)

    def _finish(self) -> None:
        m, trainer = self.metrics, self.trainer
        if trainer is not None:
            m.update(global_step=trainer.global_step, epoch=trainer.current_epoch)
            for k, v in {**self._kept_metrics, **trainer.callback_metrics}.items():
                if not k.startswith("perf/") and _scalar(v) is not None:  # perf: summary below
                    m[k] = _scalar(v)
        best = self._callback(BestWeights)
        if best is not None:
            m.update(best.summary)
        neighbours = self._callback(GpuNeighbours)
        if neighbours is not None:
            m.update(neighbours.summary)
        perf = self._callback(PerfMonitor)
        if perf is not None:
            m.update(perf.summary)
            if perf.summary.get("tokens_per_sec_per_device"):
                m["world_size"] = trainer.world_size
                m["tokens_per_sec"] = perf.summary["tokens_per_sec_per_device"] * trainer.world_size
        if m.get("attention") == "blocksparse" and trainer is not None:
            m.update(trainer.lightning_module.model.attention.stats())
        for k in ("tokens_per_sec_per_device", "mfu", "peak_memory_gib"):
            m.setdefault(k, None)
        history = self._callback(LossHistory)
        if history is not None and history.train:
            tr, k = history.train, min(10, len(history.train))
            m.update(train_loss_first=tr[0][1], train_loss_last=tr[-1][1],
                     loss_start=sum(v for _, v in tr[:k]) / k, loss_end=sum(v for _, v in tr[-k:]) / k)
        ckpt = self._callback(LastCheckpoint)
        if ckpt is not None and ckpt.path.is_file():
            m["checkpoint"] = str(ckpt.path)
        if trainer is None or trainer.is_global_zero:
            if history is not None and history.plot_path and history.plot_path.is_file():
                m["loss_curve"] = str(history.plot_path)
            m["metrics_csv"] = str(self.out_dir / "metrics.csv")
            self.write()
            self.print_summary()

    def write(self) -> None:
        text = json.dumps(self.metrics, indent=2, sort_keys=True, default=str)
        atomic_write(self.out_dir / "metrics.json", lambda tmp: tmp.write_text(text))

    def print_summary(self) -> None:
        m = self.metrics
        parts = [f"{k}={m[k]:.4g}" if isinstance(m[k], float) else f"{k}={m[k]}"
                 for k in SUMMARY_KEYS if m.get(k) is not None]
        print("[fa-train] " + " ".join(parts))
        if m.get("error"):
            print(f"[fa-train] error: {m['error'][:500]}")
        print(f"[fa-train] outputs in {self.out_dir}")
        for name in LISTED_FILES:
            if (self.out_dir / name).exists():
                print(f"[fa-train]   {self.out_dir / name}")
