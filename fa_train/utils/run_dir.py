"""Run folders: ``outputs/<experiment>/<run id>/``, one per run, never shared.

The run id is the start time plus a random tag, fixed once per process (``${run_id:}`` in the Hydra
config resolves to it), so two runs started in the same second get different folders. A folder is
claimed by creating its ``.run`` marker exclusively: a run that finds the folder already claimed
(the same process training twice, or an id collision) takes ``<folder>_1``, ``<folder>_2``, ...
A resumed run re-enters the folder of the run it continues (`enter_run_dir`). The other
processes of a multi-process run (DDP ranks, started after rank 0 claimed the folder) join it.
A driver that re-runs a run into the same folder on purpose releases it first (`release_run_dir`).
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

MARKER = ".run"
_RUN_ID: str | None = None


def run_id() -> str:
    """``YYYY-MM-DD_HH-MM-SS_<6 hex>``: this process's start time and a random tag."""
    global _RUN_ID
    if _RUN_ID is None:
        _RUN_ID = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{secrets.token_hex(3)}"
    return _RUN_ID


def register_resolver() -> None:
    """Make ``${run_id:}`` available to configs (idempotent)."""
    from omegaconf import OmegaConf
    if not OmegaConf.has_resolver("run_id"):
        OmegaConf.register_new_resolver("run_id", run_id)


def _secondary_process() -> bool:
    """Whether this process is a non-zero rank started by a launcher (Lightning, torchrun, SLURM)."""
    return any(int(os.environ.get(k, "0") or 0) > 0 for k in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def _try_claim(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path / MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    return True


def claim_run_dir(path: str | Path) -> Path:
    """`path` if no other run has claimed it, else the first free ``<path>_<n>``; claims it."""
    path = Path(path).expanduser().resolve()
    if _secondary_process():
        return path
    candidate, n = path, 0
    while not _try_claim(candidate):
        n += 1
        candidate = path.with_name(f"{path.name}_{n}")
    return candidate


def enter_run_dir(path: str | Path) -> Path:
    """The folder of a run being resumed: re-used (and marked claimed) as it is."""
    path = Path(path).expanduser().resolve()
    if not _secondary_process():
        path.mkdir(parents=True, exist_ok=True)
        (path / MARKER).write_text(f"{os.getpid()}\n")
    return path


def release_run_dir(path: str | Path) -> None:
    """Let the next run claim `path` again."""
    (Path(path) / MARKER).unlink(missing_ok=True)


def default_run_dir(log_dir: str | Path, experiment: str | None) -> Path:
    """``<log_dir>/<experiment>/<run id>`` for runs outside Hydra (e.g. a composed config)."""
    return Path(log_dir) / str(experiment or "run") / run_id()
