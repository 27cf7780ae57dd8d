"""Standard vs FlashAttention: FLOPs, HBM traffic and runtime (paper Figure 2 left).

GPT-2 medium attention (N=1024, d=64, 16 heads, batch 64), forward + backward by default.

FLOP convention (fa_train.metrics.flops): `gflops` is the model count, forward 4·B·H·N²·d
(halved when causal), backward 2.5×, fwd+bwd 3.5×, the same for every implementation.
`gflops_executed` adds what an implementation computes on top: FlashAttention recomputes
S = QKᵀ (and P) in the backward pass, 2·B·H·N²·d more (halved when causal), which is why the
paper counts more FLOPs for FlashAttention than for standard attention.
HBM bytes: DRAM bytes read + written (ncu dram__bytes_read.sum + dram__bytes_write.sum) summed
over every kernel of one call, profiled in a subprocess (fa_train.bench.ncu).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fa_train.bench.attention import _check_list, make_inputs
from fa_train.bench.common import (CHECK_TOLERANCE, PASSES, RunOptions, environment, make_progress,
                                   parse_dtype, resolve_device)
from fa_train.bench.impls import Case, default_impls
from fa_train.bench.ncu import NcuError, profile_worker
from fa_train.bench.report import Table, write_reports
from fa_train.bench.runner import measure
from fa_train.metrics.flops import attention_flops

RECOMPUTING_IMPLS = {"flash"}  # implementations that recompute S in the backward pass


def executed_flops(impl, batch, seqlen, heads, head_dim, causal, mode):
    """Model FLOPs plus the backward recomputation of S = QK^T for recomputing impls."""
    flops = attention_flops(batch, seqlen, seqlen, heads, head_dim, causal=causal, mode=mode)
    if impl in RECOMPUTING_IMPLS and mode in ("bwd", "fwd+bwd"):
        flops += attention_flops(batch, seqlen, seqlen, heads, head_dim, causal=causal) / 2
    return flops


@dataclass
class IOBenchConfig(RunOptions):
    impls: list = field(default_factory=lambda: ["standard", "flash"])
    batch: int = 64
    seqlen: int = 1024
    heads: int = 16
    head_dim: int = 64
    causal: bool = False
    passes: list = field(default_factory=lambda: ["fwd+bwd"])
    dtype: str = "bf16"
    ncu: str = "ncu"  # None: skip the byte count

    def validate(self, known_impls=None):
        known = tuple(known_impls or default_impls())
        self.impls = _check_list("impls", self.impls, allowed=known)
        self.passes = _check_list("passes", self.passes, allowed=PASSES)
        for name in ("batch", "seqlen", "heads", "head_dim"):
            _check_list(name, [getattr(self, name)], positive=True)
        parse_dtype(self.dtype)
        resolve_device(self.device)
        return self


def hbm_bytes(config, impl, pass_name, profiler=profile_worker):
    """{hbm_read_bytes, hbm_write_bytes, hbm_gb, ncu_kernels, hbm_note} for one impl and pass."""
    empty = {"hbm_read_bytes": None, "hbm_write_bytes": None, "hbm_gb": None, "ncu_kernels": None}
    if config.ncu is None:
        return empty | {"hbm_note": "ncu skipped (--no-ncu)"}
    if torch.device(config.device).type != "cuda":
        return empty | {"hbm_note": "ncu needs a CUDA device"}
    args = ["attention", "--impl", impl, "--batch", str(config.batch),
            "--seqlen", str(config.seqlen), "--heads", str(config.heads),
            "--head-dim", str(config.head_dim), "--causal", str(int(config.causal)),
            "--dtype", config.dtype, "--pass", pass_name]
    try:
        res = profiler(args, ncu=config.ncu)
    except (NcuError, OSError) as exc:
        return empty | {"hbm_note": str(exc)[:600]}
    read, write = res.get("dram__bytes_read.sum"), res.get("dram__bytes_write.sum")
    total = (read or 0.0) + (write or 0.0)
    return {"hbm_read_bytes": read, "hbm_write_bytes": write, "hbm_gb": total / 1e9,
            "ncu_kernels": res.get("kernels"), "hbm_note": None}


def run_io_bench(config, impls=None, profiler=profile_worker):
    if isinstance(config, dict):
        config = IOBenchConfig(**config)
    impls = impls or default_impls()
    config.validate(known_impls=tuple(impls))
    device = resolve_device(config.device)
    dtype = parse_dtype(config.dtype)
    b, n, h, d = config.batch, config.seqlen, config.heads, config.head_dim
    q, k, v = make_inputs(b, n, h, d, dtype, device, config.seed)
    case = Case(b, n, h, d, config.causal, 0.0, False, dtype, device)
    rows = []
    with make_progress(config.progress, len(config.impls), "io") as bar:
        for name in config.impls:
            bar.describe(f"{name}: runtime")
            measured = measure(impls[name], case, q, k, v, config.passes, check=config.check,
                               tolerance=CHECK_TOLERANCE[config.dtype],
                               warmup_ms=config.warmup_ms, rep_ms=config.rep_ms)
            for m in measured:
                bar.describe(f"{name}: ncu {m['pass']}")
                hbm = (hbm_bytes(config, name, m["pass"], profiler) if m["status"] == "ok" else
                       {"hbm_read_bytes": None, "hbm_write_bytes": None, "hbm_gb": None,
                        "ncu_kernels": None, "hbm_note": f"not profiled: {m['status']}"})
                flops = attention_flops(b, n, n, h, d, causal=config.causal, mode=m["pass"])
                executed = executed_flops(name, b, n, h, d, config.causal, m["pass"])
                rows.append({"bench": "io", "impl": name, "batch": b, "seqlen": n, "heads": h,
                             "head_dim": d, "causal": int(config.causal), "dtype": config.dtype,
                             "flops": flops, "gflops": flops / 1e9,
                             "gflops_executed": executed / 1e9,
                             "tflops": flops / (m["ms"] * 1e-3) / 1e12 if m.get("ms") else None,
                             **hbm, **m})
            bar.advance()
    return rows


IO_TABLES = (
    Table("GFLOPs (model count, fa_train.metrics.flops)", ("pass",), "impl", "gflops", ".1f"),
    Table("GFLOPs executed (flash: + backward recomputation of S)", ("pass",), "impl",
          "gflops_executed", ".1f"),
    Table("HBM read + write, GB (Nsight Compute DRAM bytes)", ("pass",), "impl", "hbm_gb", ".2f"),
    Table("Runtime, ms (median)", ("pass",), "impl", "ms", ".2f"),
    Table("Peak memory, GiB", ("pass",), "impl", "peak_mem_gib", ".2f"),
)


def _bar_chart(rows, out_dir, filename="io.png"):
    """Three bars panels like the paper's Figure 2 left: GFLOPs, HBM GB, runtime ms."""
    rows = [r for r in rows if r.get("status") == "ok"]
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(12, 3.8))
    FigureCanvasAgg(fig)
    labels = [f"{r['impl']}\n{r['pass']}" for r in rows]
    for n, (key, title) in enumerate((("gflops_executed", "GFLOPs executed"),
                                      ("hbm_gb", "HBM R/W (GB)"), ("ms", "runtime (ms)"))):
        ax = fig.add_subplot(1, 3, n + 1)
        values = [r.get(key) or 0.0 for r in rows]
        ax.bar(range(len(rows)), values, color="tab:blue")
        ax.set_xticks(range(len(rows)), labels, fontsize=8)
        ax.set_title(title)
        for x, r in enumerate(rows):
            if r.get(key) is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    path = Path(out_dir) / filename
    fig.savefig(path, dpi=110)
    return path


def write_io_reports(rows, out_dir, config, name="io"):
    if isinstance(config, dict):
        config = IOBenchConfig(**config)
    notes = [
        f"Shape: batch {config.batch}, seqlen {config.seqlen}, {config.heads} heads, head dim "
        f"{config.head_dim}, causal {int(config.causal)}, {config.dtype}.",
        "gflops: model FLOPs (forward 4·B·H·N²·d, backward 2.5×). gflops_executed: flash adds "
        "the backward recomputation of S = QKᵀ, 2·B·H·N²·d (the paper's Figure 2 counts FLOPs "
        "this way, though with its own unpublished absolute convention).",
        "HBM: dram__bytes_read.sum + dram__bytes_write.sum over every kernel of one call "
        "(ncu --clock-control none --profile-from-start off, caches flushed between kernels).",
    ]
    notes += [f"- {r['impl']} {r['pass']}: {r['hbm_note']}" for r in rows if r.get("hbm_note")]
    paths = write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                          asdict(config), IO_TABLES, (), notes)
    png = _bar_chart(rows, out_dir)
    if png is not None:
        paths["io.png"] = png
        with open(paths["md"], "a") as fh:
            fh.write(f"\n![io]({png.name})\n")
    return paths
