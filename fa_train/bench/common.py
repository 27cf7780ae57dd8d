"""Shared benchmark plumbing: devices, dtypes, timing, peak memory, OOM handling, environment."""
from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import os
import platform
import statistics
import time
import warnings
from dataclasses import dataclass

import torch

from fa_train.errors import is_oom  # noqa: F401 - the benchmarks import it from here
from fa_train.utils.provenance import git_commit

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PASSES = ("fwd", "bwd", "fwd+bwd")
# Relative error (Frobenius, against float64) above which the correctness guard fails.
CHECK_TOLERANCE = {"bf16": 5e-2, "fp16": 2e-2, "fp32": 1e-3}
# The guard compares the first `CHECK_HEADS` heads of batch element 0, at sequence lengths up to
# CHECK_MAX_SEQLEN (the float64 reference materializes N x N scores).
CHECK_HEADS = 2
CHECK_MAX_SEQLEN = 8192


class Unsupported(Exception):
    """An implementation cannot run this case; the message says why."""


@dataclass
class RunOptions:
    """Options every benchmark shares: where it runs, how long it times, what it checks."""

    device: str = "cuda"
    warmup_ms: int = 25
    rep_ms: int = 100
    seed: int = 0
    check: bool = True
    progress: bool = True


def parse_dtype(name):
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def resolve_device(name):
    """torch.device from a name, with a clear error when CUDA is asked for but missing."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for but CUDA is not available; "
                         "pass --device cpu for a (slow) CPU run of the harness")
    return device


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device):
    """Drop cached GPU blocks after an OOM or a case so the next one starts clean (CUDA only)."""
    if torch.device(device).type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def short_reason(exc, limit=300):
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


TIMERS = ("events", "cuda-graph")


def check_timer(timer):
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {', '.join(TIMERS)}, got {timer!r}")
    return timer


def bench_time(fn, device, warmup_ms=25, rep_ms=100, grad_to_none=None, timer="events"):
    """Median and 20/80 % quantiles of fn's runtime in ms.

    CUDA, timer "events": triton.testing.do_bench (L2 flushed between calls, CUDA events), so a
    call whose host time exceeds its GPU time is timed by the host. Timer "cuda-graph":
    triton.testing.do_bench_cudagraph, the calls replayed from one CUDA graph: GPU time alone (L2
    not flushed; quantiles over 10 replays). CPU: time.perf_counter around each call, after one
    warm-up, repeated until rep_ms has passed (3 to 50 calls).
    """
    if device.type == "cuda":
        from triton.testing import do_bench, do_bench_cudagraph
        if check_timer(timer) == "cuda-graph":
            med, p20, p80 = do_bench_cudagraph(fn, rep=rep_ms, grad_to_none=grad_to_none,
                                               quantiles=[0.5, 0.2, 0.8])
        else:
            med, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none,
                                     quantiles=[0.5, 0.2, 0.8])
        return {"ms": float(med), "ms_p20": float(p20), "ms_p80": float(p80)}
    times = []
    fn()
    deadline = time.perf_counter() + rep_ms / 1e3
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        if grad_to_none:
            for t in grad_to_none:
                t.grad = None
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    qs = statistics.quantiles(times, n=10, method="inclusive")
    return {"ms": statistics.median(times), "ms_p20": qs[1], "ms_p80": qs[7]}


def host_time(fn, device, grad_to_none=None, calls=10):
    """Host (CPU) ms to issue one call of fn, the GPU left to catch up afterwards; CUDA only. A
    call whose host time reaches its GPU time keeps the GPU waiting, and event timing then
    measures the host."""
    if device.type != "cuda":
        return None
    synchronize(device)
    total = 0.0
    for _ in range(calls):
        for t in grad_to_none or ():
            t.grad = None
        start = time.perf_counter()
        fn()
        total += time.perf_counter() - start
    synchronize(device)
    return total / calls * 1e3


def peak_memory(fn, device):
    """(peak bytes allocated during one call of fn, bytes allocated before it); CUDA only."""
    if device.type != "cuda":
        return None, None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device), before


@contextlib.contextmanager
def captured_warnings():
    """Record warnings (SDPA explains in warnings why no kernel was available); yields the list."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def warning_texts(caught):
    return [str(getattr(w, "message", w)).replace("\n", " ") for w in caught]


def relative_error(out, ref, row_mask=None):
    """||out - ref|| / ||ref|| in float64; row_mask (N,) bool keeps only those query rows."""
    out, ref = out.double(), ref.double()
    if row_mask is not None:
        out, ref = out[row_mask], ref[row_mask]
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def environment(device):
    """What a result file needs to say where and when it was measured."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "gpu": None,
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   sm_count=props.multi_processor_count, cudnn=torch.backends.cudnn.version())
    return env


def make_progress(enabled, total, description):
    """A rich progress bar (or a no-op stand-in) with .advance() and .describe()."""
    if not enabled:
        return _NoProgress()
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), transient=False)
    return _RichProgress(progress, total, description)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def advance(self, n=1):
        pass

    def describe(self, text):
        pass


class _RichProgress(_NoProgress):
    def __init__(self, progress, total, description):
        self.progress, self.total, self.description = progress, total, description

    def __enter__(self):
        self.progress.__enter__()
        self.task = self.progress.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def advance(self, n=1):
        self.progress.advance(self.task, n)

    def describe(self, text):
        self.progress.update(self.task, description=text)
