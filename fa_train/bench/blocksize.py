"""Forward runtime vs kernel block size (paper Figure 2 middle), GPT-2 medium attention shape.

Times kernels.flash_attn_forward(q, k, v, block_m=M, block_n=N) for each (M, N); a block size
the kernel refuses (an error from the launch wrapper, or Triton running out of shared memory) is
recorded as "unsupported" with the reason.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import torch

from fa_train.bench.attention import _check_list, make_inputs
from fa_train.bench.common import (RunOptions, Unsupported, bench_time, environment, free_memory,
                                   is_oom, make_progress, parse_dtype, resolve_device,
                                   short_reason)
from fa_train.bench.report import Plot, Table, write_reports
from fa_train.metrics.flops import attention_flops

_BLOCK = re.compile(r"^(\d+)(?:x(\d+))?$")


def parse_block(text):
    """'128' -> (128, 128); '128x64' -> (128, 64)."""
    match = _BLOCK.match(str(text).strip().lower())
    if not match:
        raise ValueError(f"blocks: {text!r} is not a block size B or MxN (e.g. 128 or 128x64)")
    m = int(match.group(1))
    n = int(match.group(2)) if match.group(2) else m
    if m <= 0 or n <= 0:
        raise ValueError(f"blocks: {text!r} must be positive")
    return m, n


@dataclass
class BlocksizeBenchConfig(RunOptions):
    blocks: list = field(default_factory=lambda: ["16", "32", "64", "128", "256"])
    batch: int = 64
    seqlen: int = 1024
    heads: int = 16
    head_dim: int = 64
    causal: bool = False
    dtype: str = "bf16"

    def validate(self):
        self.blocks = [f"{m}x{n}" for m, n in map(parse_block, _check_list("blocks", self.blocks))]
        for name in ("batch", "seqlen", "heads", "head_dim"):
            _check_list(name, [getattr(self, name)], positive=True)
        parse_dtype(self.dtype)
        resolve_device(self.device)
        return self


def _forward_fn(device):
    if device.type != "cuda":
        raise Unsupported("kernels.flash_attn_forward runs Triton kernels: needs CUDA")
    from kernels import flash_attn_forward
    return flash_attn_forward


def run_blocksize_bench(config, forward=None):
    """Rows, one per block size. forward: the function to time (tests pass a fake)."""
    if isinstance(config, dict):
        config = BlocksizeBenchConfig(**config)
    config.validate()
    device = resolve_device(config.device)
    dtype = parse_dtype(config.dtype)
    q, k, v = make_inputs(config.batch, config.seqlen, config.heads, config.head_dim, dtype,
                          device, config.seed)
    flops = attention_flops(config.batch, config.seqlen, config.seqlen, config.heads,
                            config.head_dim, causal=config.causal, mode="fwd")
    rows = []
    with make_progress(config.progress, len(config.blocks), "blocksize") as bar:
        for text in config.blocks:
            block_m, block_n = parse_block(text)
            bar.describe(f"block_m={block_m} block_n={block_n}")
            row = {"bench": "blocksize", "impl": "flash", "pass": "fwd", "block_m": block_m,
                   "block_n": block_n, "batch": config.batch, "seqlen": config.seqlen,
                   "heads": config.heads, "head_dim": config.head_dim, "causal": int(config.causal),
                   "dtype": config.dtype, "flops": flops, "status": "ok", "reason": None,
                   "ms": None, "ms_p20": None, "ms_p80": None, "tflops": None}
            try:
                fn = forward or _forward_fn(device)

                def call(fn=fn):
                    return fn(q, k, v, causal=config.causal, block_m=block_m, block_n=block_n)
                call()
                row.update(bench_time(call, device, config.warmup_ms, config.rep_ms))
                row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
            except Exception as exc:  # noqa: BLE001 - a refused block size is a result
                row.update(status="OOM" if is_oom(exc) else "unsupported",
                           reason=str(exc) if isinstance(exc, Unsupported) else short_reason(exc))
                free_memory(device)
            rows.append(row)
            bar.advance()
    return rows


BLOCKSIZE_TABLES = (
    Table("Forward runtime (ms) vs block size", ("block_m", "block_n"), "pass", "ms",
          ".3f"),
    Table("Forward TFLOP/s vs block size", ("block_m", "block_n"), "pass", "tflops", ".1f"),
)


def write_blocksize_reports(rows, out_dir, config, name="blocksize"):
    if isinstance(config, dict):
        config = BlocksizeBenchConfig(**config)
    plots = (Plot("blocksize_runtime.png", "block_m", "ms", ("block_n",), (), {},
                  "forward runtime vs block size (Figure 2 middle)", "block_m (query block rows)",
                  "runtime (ms)", logx=True, logy=False),)
    notes = [f"Shape: batch {config.batch}, seqlen {config.seqlen}, {config.heads} heads, head dim "
             f"{config.head_dim}, causal {int(config.causal)}, {config.dtype} (GPT-2 medium "
             "attention, paper Figure 2 middle). kernels.flash_attn_forward with explicit "
             "block_m / block_n."]
    return write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                         asdict(config), BLOCKSIZE_TABLES, plots, notes)
