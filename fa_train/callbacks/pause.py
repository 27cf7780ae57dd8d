"""Pausing a run after a stretch of wall time, or at a moment, to continue it later with ``resume=``.

``pause_after=MINUTES`` (config) stops training at the first optimizer step after MINUTES of wall
time in this process; ``pause_at=UNIX_TIME`` at the first step after that moment (a batch job's
end, start-up included). The checkpoint is written as at any end of training, the test pass is
skipped and metrics.json records status "paused"; ``resume=<run folder>`` continues at the same step
and data position. Unlike ``trainer.max_time`` (a cap on the whole run, carried across resumes),
the pause counts only this process's time, so a long run fits GPU jobs of a few minutes each.
With several processes the ranks decide together every `SYNC_EVERY` steps (one all-reduce), so
that all of them stop, and save their checkpoint, at the same step.
"""
from __future__ import annotations

import time

import lightning as L

SYNC_EVERY = 50


class PauseAfter(L.Callback):
    """Stop at the first step past `minutes` of training in this process or past Unix time `at`
    (either may be None, not both)."""

    def __init__(self, minutes: float | None = None, at: float | None = None):
        super().__init__()
        if minutes is None and at is None:
            raise ValueError("PauseAfter needs minutes or at")
        if minutes is not None and not minutes > 0:
            raise ValueError(f"pause_after must be a positive number of minutes, got {minutes!r}")
        self.limit_s = float(minutes) * 60.0 if minutes is not None else float("inf")
        self.at = float(at) if at is not None else float("inf")
        self.paused = False
        self._t0 = time.monotonic()

    def on_train_start(self, trainer, pl_module):
        self._t0 = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.should_stop:
            return
        over = time.monotonic() - self._t0 >= self.limit_s or time.time() >= self.at
        if trainer.world_size > 1:
            if trainer.global_step % SYNC_EVERY:
                return
            over = trainer.strategy.reduce_boolean_decision(over, all=False)
        if over:
            self.paused = True
            trainer.should_stop = True
