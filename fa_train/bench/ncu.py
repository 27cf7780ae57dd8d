"""Nsight Compute as a subprocess: DRAM bytes read + written by every kernel of a profiled region.

The worker (fa_train.bench.io_worker) warms up outside the region, then brackets one call (an
attention pass or a decode step) with cudaProfilerStart/Stop (torch.cuda.profiler); ncu runs with
--profile-from-start off, so only the kernels of that call are counted, and their
dram__bytes_{read,write}.sum are summed. --cache-control all (ncu's default, passed explicitly)
flushes the caches before every kernel, so each kernel's reads start from DRAM; writes still held in
L2 when a kernel ends may go uncounted.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
_UNIT = {"byte": 1, "bytes": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6,
         "gbyte": 1e9, "gb": 1e9, "tbyte": 1e12, "tb": 1e12, "kib": 2**10, "mib": 2**20,
         "gib": 2**30, "": 1}


class NcuError(RuntimeError):
    pass


def parse_ncu_csv(text):
    """Sum each metric over all kernels of ncu --csv output.

    Returns {"kernels": number of profiled kernels, metric name: bytes, ...}. Lines before the CSV
    header (ncu's ==PROF== messages, program output) are skipped; values may carry thousands
    separators and units (byte, Kbyte, Mbyte, Gbyte, ...).
    """
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuError("no CSV table in ncu output (no kernel was profiled?)")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    totals, kernels = {}, set()
    for row in reader:
        name = row.get("Metric Name")
        if not name or row.get("ID") is None:
            continue
        unit = (row.get("Metric Unit") or "").strip().lower()
        if unit not in _UNIT:
            raise NcuError(f"unknown unit {unit!r} for metric {name}")
        raw = (row.get("Metric Value") or "").replace(",", "").strip()
        try:
            value = float(raw)
        except ValueError:
            raise NcuError(f"metric {name} has a non-numeric value {raw!r}") from None
        totals[name] = totals.get(name, 0.0) + value * _UNIT[unit]
        kernels.add(row["ID"])
    if not kernels:
        raise NcuError("ncu CSV table has no metric rows")
    return {"kernels": len(kernels), **totals}


def find_ncu(ncu="ncu"):
    """Path of the ncu executable; NcuError naming it when it is not on PATH."""
    exe = shutil.which(ncu)
    if exe is None:
        raise NcuError(f"ncu unavailable: {ncu!r} is not on PATH (install Nsight Compute)")
    return exe


def _project_root():
    return str(Path(__file__).resolve().parents[2])


def profile_worker(worker_args, ncu="ncu", timeout=600):
    """Run `python -m fa_train.bench.io_worker ARGS` under ncu; returns parse_ncu_csv's dict."""
    exe = find_ncu(ncu)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_project_root(), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = [exe, "--clock-control", "none", "--cache-control", "all",
               "--profile-from-start", "off", "--metrics", ",".join(METRICS), "--csv",
               "--print-units", "base", "--log-file", str(log),
               sys.executable, "-m", "fa_train.bench.io_worker", *worker_args]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise NcuError(f"ncu ran past its {timeout} s limit") from None
        text = log.read_text() if log.exists() else ""
    if res.returncode != 0:
        tail = (res.stderr or res.stdout or text)[-800:].replace("\n", " ")
        raise NcuError(f"ncu exited with {res.returncode}: {tail}")
    try:
        return parse_ncu_csv(text)
    except NcuError as exc:
        tail = (res.stderr or "")[-400:].replace("\n", " ")
        raise NcuError(f"{exc}; ncu log: {text[-400:]!r}; stderr: {tail}") from None
