"""``metrics.csv`` that a resumed run continues.

Lightning's CSVLogger deletes an existing metrics.csv when its folder is not empty. A resumed run
writes into the folder of the run it continues, so this logger keeps the file and appends to it
(`trim_after` first drops the rows logged after the checkpoint, which the resumed run redoes).
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


class _AppendingWriter(ExperimentWriter):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = sorted(csv.DictReader(f).fieldnames or [])

    def _check_log_dir_exists(self) -> None:  # keep what the run logged before a resume
        pass


class RunCSVLogger(CSVLogger):
    """CSVLogger that appends to the run folder's metrics.csv instead of replacing it."""

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def trim_after(path: str | Path, step: int) -> int:
    """Drop the rows of a metrics.csv logged after optimizer step `step`; returns how many."""
    path = Path(path)
    if not path.is_file():
        return 0
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], list(reader)
    keep = [r for r in rows if not r.get("step") or int(float(r["step"])) < step]
    if len(keep) == len(rows):
        return 0
    tmp = path.with_name(f".{path.name}.partial")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(keep)
    os.replace(tmp, path)
    return len(rows) - len(keep)
