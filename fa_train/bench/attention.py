"""Dense attention benchmark (paper Figure 3; shapes and FLOP convention of shared/anchors.md).

Shapes: batch x seqlen = tokens (batch >= 1), heads = hidden / head_dim. FLOPs from
fa_train.metrics.flops.attention_flops (forward 4·B·H·N²·d, halved when causal; backward 2.5x;
padding counted at full length). Runtime: median of triton.testing.do_bench (CUDA events, L2
flushed), or with timer "cuda-graph" of calls replayed from a CUDA graph (GPU time without the
host's); the backward pass is timed alone (backward with retain_graph on a stored forward graph).
Memory: torch.cuda.max_memory_allocated during one call of the pass, inputs included.
With `repeats` R > 1 every implementation of a shape is measured R times, the implementations
alternating (A, B, C, A, B, C, ...) so that drift hits all alike; `ms` (and TFLOP/s) is then the
median of the repeats' medians, `ms_min`/`ms_max` their range, `ms_repeats` the list. On a GPU of
fa_train.bench.floors.DEVICE_PEAKS the exact rows also get the pass's floor (`floor_bytes`,
`floor_ms`, `floor_bound`) and `roofline_fraction` = floor_ms / ms.

With a sliding window (`window`: keys each side of the diagonal), `local` (ours) and `flex`
(FlexAttention with a sliding-window block mask) compute the window and count the FLOPs of the
pairs it keeps; the other implementations (dense `flash` by default) compute full attention
beside them. At a fixed token budget (batch x N), a cost linear in N is a flat runtime.
The approximate baselines (impls linformer, linear, performer, reformer, smyrf) get runtime and
memory only: no FLOP count and no check against exact attention.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

import torch

from fa_train.bench.common import (CHECK_TOLERANCE, PASSES, RunOptions, check_timer, environment,
                                   make_progress, parse_dtype, resolve_device)
from fa_train.bench.floors import attention_floor, device_peaks
from fa_train.bench.impls import (ATTENTION_IMPL_NAMES, KNOWN_IMPL_NAMES, Case, default_impls,
                                  padding_lengths)
from fa_train.bench.report import Plot, Table, write_reports
from fa_train.bench.runner import measure
from fa_train.errors import check_int
from fa_train.metrics.flops import attention_flops

DEFAULT_SEQLENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_SEQLENS = (512, 2048, 8192)
WINDOW_SEQLENS = (1024, 2048, 4096, 8192, 16384, 32768)


def _check_list(name, values, allowed=None, positive=False):
    values = list(values)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        if allowed is not None and v not in allowed:
            raise ValueError(f"{name}: {v!r} is not one of {list(allowed)}")
        if positive and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{name}: {v!r} is not a positive integer")
    return values


@dataclass
class AttentionBenchConfig(RunOptions):
    impls: list = field(default_factory=lambda: list(ATTENTION_IMPL_NAMES))
    seqlens: list = field(default_factory=lambda: list(DEFAULT_SEQLENS))
    head_dims: list = field(default_factory=lambda: [64, 128])
    causal: list = field(default_factory=lambda: [False, True])
    dropout_p: float = 0.0
    padding: bool = False
    passes: list = field(default_factory=lambda: list(PASSES))
    dtype: str = "bf16"
    tokens: int = 16384
    hidden: int = 2048
    timer: str = "events"  # or "cuda-graph": GPU time without the host's (common.bench_time)
    window: Optional[int] = None  # sliding window, keys each side (None: full attention)
    repeats: int = 1  # measurements of each (shape, impl), the impls alternating

    def validate(self, known_impls=KNOWN_IMPL_NAMES):
        self.impls = _check_list("impls", self.impls, allowed=known_impls)
        self.seqlens = sorted(_check_list("seqlens", self.seqlens, positive=True))
        self.head_dims = _check_list("head_dims", self.head_dims, positive=True)
        self.causal = [bool(c) for c in _check_list("causal", self.causal, allowed=(0, 1))]
        self.passes = _check_list("passes", self.passes, allowed=PASSES)
        parse_dtype(self.dtype)
        if check_timer(self.timer) == "cuda-graph" and "bwd" in self.passes:
            raise ValueError("passes: 'bwd' cannot be timed with timer cuda-graph (its stored "
                             "forward graph was recorded outside the capture); time fwd+bwd")
        if not 0.0 <= float(self.dropout_p) < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {self.dropout_p}")
        check_int("repeats", self.repeats)
        for name in ("tokens", "hidden", "rep_ms"):
            _check_list(name, [getattr(self, name)], positive=True)
        if self.window is not None:
            _check_list("window", [self.window], positive=True)
        if self.warmup_ms < 0:
            raise ValueError(f"warmup_ms must be >= 0, got {self.warmup_ms}")
        for d in self.head_dims:
            if self.hidden % d:
                raise ValueError(f"hidden {self.hidden} is not divisible by head dim {d}")
        resolve_device(self.device)
        return self


def shape_for(tokens, hidden, seqlen, head_dim):
    """(batch, heads): batch x seqlen = tokens (at least 1), heads = hidden / head_dim."""
    return max(1, tokens // seqlen), hidden // head_dim


def window_density(seqlen, window, causal):
    """The fraction of the N x N score matrix that a sliding window of `window` keys each side
    (and the causal mask) keeps."""
    rows = torch.arange(seqlen, dtype=torch.float64)
    last = rows if causal else torch.clamp(rows + window, max=seqlen - 1)
    kept = last - torch.clamp(rows - window, min=0) + 1
    return float(kept.sum()) / seqlen ** 2


def make_inputs(batch, seqlen, heads, head_dim, dtype, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(batch, seqlen, heads, head_dim, dtype=dtype, device=device, generator=gen)
            for _ in range(3)]


def combine_repeats(runs):
    """One row per pass from `runs` (the rows of each repeat, passes in the same order): the first
    repeat's row with ms, ms_p20 and ms_p80 the medians over the repeats that timed the pass,
    ms_min/ms_max the range of their ms, ms_repeats the list and repeats their number. A pass that
    failed in the first repeat keeps its failure."""
    rows = []
    for by_pass in zip(*runs):
        row = dict(by_pass[0], repeats=0, ms_min=None, ms_max=None, ms_repeats=None)
        timed = [m for m in by_pass if m["status"] == "ok"] if row["status"] == "ok" else []
        if timed:
            times = [m["ms"] for m in timed]
            row.update({key: statistics.median(m[key] for m in timed)
                        for key in ("ms", "ms_p20", "ms_p80")},
                       repeats=len(timed), ms_min=min(times), ms_max=max(times), ms_repeats=times)
        rows.append(row)
    return rows


def gpu_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def run_attention_bench(config, impls=None):
    """Run the dense attention benchmark; returns the rows (one per impl x shape x pass).

    config: AttentionBenchConfig or a dict of its fields. impls: {name: AttentionImpl} to use
    instead of the defaults (tests pass fakes).
    """
    if isinstance(config, dict):
        config = AttentionBenchConfig(**config)
    impls = impls or default_impls()
    config.validate(known_impls=tuple(impls))
    device = resolve_device(config.device)
    dtype = parse_dtype(config.dtype)
    tolerance = CHECK_TOLERANCE[config.dtype]
    peaks = device_peaks(gpu_name(device), config.dtype)
    rows = []
    groups = [(d, c) for d in config.head_dims for c in config.causal]
    total = len(groups) * len(config.seqlens) * len(config.impls) * config.repeats
    with make_progress(config.progress, total, "attention") as bar:
        for head_dim, causal in groups:
            for n_idx, seqlen in enumerate(config.seqlens):
                batch, heads = shape_for(config.tokens, config.hidden, seqlen, head_dim)
                q, k, v = make_inputs(batch, seqlen, heads, head_dim, dtype, device, config.seed)
                lengths = (padding_lengths(batch, seqlen, config.seed, device)
                           if config.padding else None)
                case = Case(batch, seqlen, heads, head_dim, causal, float(config.dropout_p),
                            config.padding, dtype, device, lengths, config.window)
                runs = {name: [] for name in config.impls}
                for repeat in range(config.repeats):
                    for name in config.impls:
                        # an impl none of whose passes ran in the first repeat is not run again
                        if not repeat or any(m["status"] == "ok" for m in runs[name][0]):
                            bar.describe(f"{name} d={head_dim} causal={int(causal)} N={seqlen}")
                            impl_case = (case if impls[name].applies_window
                                         else replace(case, window=None))
                            runs[name].append(measure(
                                impls[name], impl_case, q, k, v, config.passes,
                                check=config.check and n_idx == 0 and repeat == 0,
                                tolerance=tolerance, warmup_ms=config.warmup_ms,
                                rep_ms=config.rep_ms, timer=config.timer))
                        bar.advance()
                for name in config.impls:
                    window = case.window if impls[name].applies_window else None
                    # the causal mask is part of a window's density
                    flop_causal, density = ((causal, 1.0) if window is None else
                                            (False, window_density(seqlen, window, causal)))
                    for m in combine_repeats(runs[name]):
                        row = {"bench": "attention", "impl": name, "batch": batch,
                               "seqlen": seqlen, "heads": heads, "head_dim": head_dim,
                               "causal": int(causal), "dropout_p": case.dropout_p,
                               "padding": int(config.padding), "dtype": config.dtype,
                               "window": window, "flops": None, "tflops": None, **m}
                        if impls[name].exact:      # approximations do other work
                            row["flops"] = attention_flops(batch, seqlen, seqlen, heads,
                                                           head_dim, causal=flop_causal,
                                                           mode=m["pass"], density=density)
                            if m["ms"]:
                                row["tflops"] = row["flops"] / (m["ms"] * 1e-3) / 1e12
                            if peaks:  # adds floor_bytes, floor_ms, floor_bound (flops alike)
                                row.update(attention_floor(batch, heads, seqlen, head_dim,
                                                           flop_causal, config.dtype, m["pass"],
                                                           peaks, density))
                                row["roofline_fraction"] = (row["floor_ms"] / m["ms"]
                                                            if m["ms"] else None)
                        rows.append(row)
                del q, k, v
    return rows


ATTENTION_TABLES = (
    Table("TFLOP/s (higher is better)", ("head_dim", "causal", "seqlen", "pass"), "impl", "tflops",
          ".1f"),
    Table("Runtime, ms (median)", ("head_dim", "causal", "seqlen", "pass"), "impl", "ms", ".3f"),
    Table("Host time to issue one call, ms (where it reaches the runtime, the GPU waits on the host "
          "and event timing measures the host)", ("head_dim", "causal", "seqlen", "pass"), "impl",
          "host_ms", ".3f"),
    Table("Memory of the pass, GiB: peak max_memory_allocated minus what was allocated before "
          "the call (inputs, dout, and for bwd the saved forward graph)",
          ("head_dim", "causal", "seqlen", "pass"), "impl", "mem_over_inputs_gib", ".3f"),
    Table("Peak memory, GiB (max_memory_allocated during the pass, inputs included)",
          ("head_dim", "causal", "seqlen", "pass"), "impl", "peak_mem_gib", ".3f"),
)
REPEAT_TABLES = tuple(
    Table(f"Runtime, ms: the {which} repeat's median", ("head_dim", "causal", "seqlen", "pass"),
          "impl", f"ms_{key}", ".3f") for which, key in (("fastest", "min"), ("slowest", "max")))
ROOFLINE_TABLE = Table(
    "Share of the floor (floor_ms / ms; the floor: the pass's HBM bytes at peak bandwidth or its "
    "matmul FLOPs at the tensor-core peak, whichever takes longer)",
    ("head_dim", "causal", "seqlen", "pass"), "impl", "roofline_fraction", ".2f")


def attention_plots(passes):
    plots = []
    for p in passes:
        tag = p.replace("+", "_")
        plots.append(Plot(f"attention_runtime_{tag}.png", "seqlen", "ms", ("impl",),
                          ("head_dim", "causal"), {"pass": p}, f"{p} runtime vs sequence length",
                          "sequence length N", "runtime (ms)"))
    mem_pass = "fwd+bwd" if "fwd+bwd" in passes else passes[0]
    plots.append(Plot("attention_memory.png", "seqlen", "mem_over_inputs_gib", ("impl",),
                      ("head_dim", "causal"), {"pass": mem_pass},
                      f"memory of {mem_pass} (peak minus inputs) vs sequence length",
                      "sequence length N", "memory (GiB)"))
    return plots


_TIMER_NOTES = {
    "events": "CUDA events around each call, L2 flushed between calls (a call whose host work "
              "exceeds its GPU work is timed by the host).",
    "cuda-graph": "calls replayed from one CUDA graph (GPU time without the host's; L2 not "
                  "flushed).",
    "cpu": "time.perf_counter around each call (CPU).",
}


def write_attention_reports(rows, out_dir, config, name="attention"):
    if isinstance(config, dict):
        config = AttentionBenchConfig(**config)
    notes = [
        f"Shapes: batch × seqlen = {config.tokens} tokens, heads = {config.hidden} / head_dim; "
        f"dtype {config.dtype}; dropout {config.dropout_p}; padding mask "
        f"{'on (valid lengths uniform in [N/2, N])' if config.padding else 'off'}.",
        "FLOPs: forward 4·B·H·N²·d (halved when causal), backward 2.5×, fwd+bwd 3.5× "
        "(fa_train.metrics.flops.attention_flops); TFLOP/s = FLOPs / median time.",
        "Timer: " + _TIMER_NOTES["cpu" if config.device == "cpu" else config.timer],
        "Correctness guard: first sequence length of each (head_dim, causal) group, batch 0, "
        "first heads, against kernels.reference_attention in float64 (check_rel_err in the JSON).",
    ]
    tables = ATTENTION_TABLES
    if config.repeats > 1:
        notes.append(f"Repeats: each cell measured {config.repeats} times, the implementations "
                     "alternating; runtime and TFLOP/s from the median of the repeats' medians.")
        tables += REPEAT_TABLES
    if any(r.get("floor_ms") for r in rows):
        notes.append("Floors (fa_train.bench.floors): HBM bytes (q, k, v, o; backward also dO, "
                     "the log-sum-exp, dq, dk, dv) at the GPU's peak bandwidth and matmul FLOPs at "
                     "its dense tensor-core peak.")
        tables += (ROOFLINE_TABLE,)
    if config.window is not None:
        notes.append(
            f"Sliding window: {config.window} keys each side of the diagonal (causal: before "
            f"it) in the rows of {', '.join(n for n in config.impls if n in ('local', 'flex'))}, "
            "whose FLOPs count the kept pairs only; the other implementations compute full "
            "attention. At a fixed token budget a cost linear in N is a flat runtime.")
    return write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                         asdict(config), tables, attention_plots(config.passes), notes)
