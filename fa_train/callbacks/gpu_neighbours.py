"""Watching for other jobs on the run's GPU, which would slow its steps without an error.

A daemon thread asks the driver every `every_s` seconds which processes hold a compute context on
which GPU (nvidia-smi's compute apps). The run's GPUs are those where this process is listed; a
process listed there that is neither in this process's tree nor one of its ancestors (the ranks of
one distributed run are) is another job. The first time one is seen, ``shared_from_step`` becomes
the step of the last poll that found the GPU alone: throughput and time to accuracy measured after
it are not the run's own. metrics.json records ``gpu_shared_from_step`` (None: alone throughout)
and ``gpu_watch``: "listed" when the driver listed this process (so it would list others),
"not listed" when it never did (e.g. a container that hides process IDs): then nothing could be
seen. The mark is kept in checkpoints, so a paused run keeps it.
"""
from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Callable

import lightning as L

QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]


def parse_compute_apps(text: str) -> list[tuple[int, str]]:
    """(pid, GPU UUID) of each line of nvidia-smi's compute-apps query."""
    apps = []
    for line in text.splitlines():
        pid, _, uuid = line.partition(",")
        if pid.strip().isdigit() and uuid.strip():
            apps.append((int(pid), uuid.strip()))
    return apps


def compute_apps() -> list[tuple[int, str]] | None:
    """(pid, GPU UUID) of every process with a compute context; None when the driver cannot be
    asked."""
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_compute_apps(done.stdout) if done.returncode == 0 else None


def parent(pid: int) -> int | None:
    """The parent of process `pid`; None when it is not visible here."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])   # after "pid (name)": state, ppid, ...


def ancestors(pid: int, parent_of: Callable[[int], int | None] = parent) -> set[int]:
    """`pid` and the processes above it."""
    chain = set()
    while pid and pid not in chain:
        chain.add(pid)
        pid = parent_of(pid) or 0
    return chain


class GpuNeighbours(L.Callback):
    """Records the step from which another job shared the run's GPU (on CUDA; idle elsewhere)."""

    def __init__(self, every_s: float = 15.0,
                 list_apps: Callable[[], list[tuple[int, str]] | None] = compute_apps,
                 parent_of: Callable[[int], int | None] = parent):
        super().__init__()
        self.every_s = float(every_s)
        self.list_apps, self.parent_of = list_apps, parent_of
        self.shared_from_step: int | None = None
        self.listed = False       # the driver listed this process at some poll
        self.watching = False
        self._alone_step = 0      # the step of the last poll that found the GPU alone
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self, step: int) -> None:
        """One look at the driver's list, at optimizer step `step`."""
        apps = self.list_apps()
        if apps is None:
            return
        me = os.getpid()
        mine = {uuid for pid, uuid in apps if pid == me}
        self.listed |= bool(mine)
        above = ancestors(me, self.parent_of)   # this process and those that started it
        others = [pid for pid, uuid in apps if uuid in mine and pid not in above
                  and me not in ancestors(pid, self.parent_of)]   # nor one it started
        if not others:
            self._alone_step = step
        elif self.shared_from_step is None:
            self.shared_from_step = self._alone_step

    def on_train_start(self, trainer, pl_module):
        if pl_module.device.type != "cuda":
            return
        self.watching = True
        self._alone_step = trainer.global_step
        self.poll(trainer.global_step)
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, args=(trainer,), daemon=True,
                                        name="gpu-neighbours")
        self._thread.start()

    def _watch(self, trainer) -> None:
        while not self._stop.wait(self.every_s):
            self.poll(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        self._end()

    def teardown(self, trainer, pl_module, stage):
        self._end()

    def _end(self) -> None:
        """Stop the watch (training over, or ended by an error)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def summary(self) -> dict:
        """metrics.json's keys (none when the run did not train on CUDA)."""
        if not self.watching:
            return {}
        return {"gpu_shared_from_step": self.shared_from_step,
                "gpu_watch": "listed" if self.listed else "not listed"}

    def state_dict(self):
        return {"shared_from_step": self.shared_from_step}

    def load_state_dict(self, state):
        self.shared_from_step = state.get("shared_from_step")
