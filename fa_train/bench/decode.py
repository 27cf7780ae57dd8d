"""Decode-step benchmark (fa-bench decode): one new token per sequence attending a KV cache.

Grid: batch x cache length L x (Hq, Hkv) x head_dim. Every implementation attends q (B, 1, Hq, d)
over the same L cached keys (B, L, Hkv, d):
  flash_decode   kernels.flash_attn_with_kvcache: appends the step's k/v in place at L - 1, then
                 attends (split-KV with the automatic split count, GQA groups per program);
  sdpa_flash, sdpa_cudnn, sdpa_efficient, sdpa_math   torch SDPA pinned to one backend; GQA by
                 enable_gqa, or where the backend lacks it (cudnn, efficient) by grouping the
                 queries: the Hq/Hkv query heads of a K/V head as its query rows (q viewed,
                 nothing copied; each K/V head read once for its group);
  flex           torch.compile(flex_attention), no mask (enable_gqa);
  materialized   q @ K^T, softmax, @ V in PyTorch, GQA by grouping the queries (K/V not repeated).
Time: median of triton.testing.do_bench (CUDA events, L2 flushed) or, with timer "cuda-graph",
of calls replayed from a CUDA graph (GPU time without the host's); host_ms is the host time to
issue one call. Bandwidth: bytes = K and V read once + q read + out written
(2·B·L·Hkv·d + 2·B·Hq·d elements), GB/s = bytes / median time. Correctness guard: batch
element 0 against kernels.reference_attention_with_kvcache in float64, at L <= CHECK_MAX_SEQLEN.

Measured bytes (--ncu, config field `ncu`): each step that ran also runs once under Nsight Compute
(fa_train.bench.ncu, a worker subprocess, caches flushed before every kernel): dram_read_bytes and
dram_write_bytes summed over the step's kernels, read_over_ideal = dram_read_bytes / the K and V
bytes (2·B·L·Hkv·d elements): 1.0 when each K/V head is read once per GQA group. Caches no larger
than L2 (50 MB on an H100) can hide re-reads, hence the default --ncu grid NCU_GRID (K and V of
67 MB to 1 GB).
"""
from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import asdict, dataclass, field

import torch

from fa_train.bench.attention import _TIMER_NOTES, _check_list
from fa_train.bench.common import (CHECK_MAX_SEQLEN, CHECK_TOLERANCE, RunOptions, bench_time,
                                   captured_warnings, check_timer, environment, free_memory,
                                   host_time, make_progress, parse_dtype, relative_error,
                                   resolve_device)
from fa_train.bench.impls import flex_attention_fn
from fa_train.bench.ncu import METRICS, NcuError, find_ncu, profile_worker
from fa_train.bench.report import Plot, Table, pivot_markdown, write_reports
from fa_train.bench.runner import classify

DECODE_IMPL_NAMES = ("flash_decode", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math",
                     "flex", "materialized")
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}
GROUPED_QUERY_SDPA = ("sdpa_cudnn", "sdpa_efficient")  # backends without enable_gqa
DEFAULT_CACHE_LENS = tuple(1024 << i for i in range(8))  # 1K .. 128K
QUICK_CACHE_LENS = (4096, 16384, 65536)
ROW_KEYS = ("status", "reason", "ms", "ms_p20", "ms_p80", "host_ms", "check_rel_err",
            "check_passed")
DRAM_KEYS = ("dram_read_bytes", "dram_write_bytes", "read_over_ideal", "ncu_kernels", "ncu_note")
# Default --ncu grid: Hq 32 over 8 and 32 K/V heads, both with a 268 MB K+V cache among its cells.
NCU_GRID = {"batches": [1], "cache_lens": [16384, 65536], "heads": ["32:32", "32:8"],
            "head_dims": [128]}


def parse_heads(text):
    """(Hq, Hkv) from 'HQ:HKV' (or 'H' for Hq = Hkv)."""
    parts = str(text).split(":")
    try:
        heads, heads_kv = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, 0)
    except ValueError:
        heads = heads_kv = 0
    if heads <= 0 or heads_kv <= 0 or heads % heads_kv:
        raise ValueError(f"heads: {text!r} must be HQ:HKV with HQ a positive multiple of HKV")
    return heads, heads_kv


@dataclass
class DecodeBenchConfig(RunOptions):
    impls: list = field(default_factory=lambda: list(DECODE_IMPL_NAMES))
    batches: list = field(default_factory=lambda: [1, 2, 4, 8])
    cache_lens: list = field(default_factory=lambda: list(DEFAULT_CACHE_LENS))
    heads: list = field(default_factory=lambda: ["32:32", "32:8"])
    head_dims: list = field(default_factory=lambda: [64, 128])
    dtype: str = "bf16"
    timer: str = "events"
    ncu: str = None  # ncu executable measuring DRAM bytes per step; None: no measurement

    def validate(self):
        self.impls = _check_list("impls", self.impls, allowed=DECODE_IMPL_NAMES)
        self.batches = _check_list("batches", self.batches, positive=True)
        self.cache_lens = sorted(_check_list("cache_lens", self.cache_lens, positive=True))
        self.head_dims = _check_list("head_dims", self.head_dims, positive=True)
        self.heads = [":".join(map(str, parse_heads(h))) for h in _check_list("heads", self.heads)]
        for d in self.head_dims:
            if d > 256:
                raise ValueError(f"head_dims: {d} is above 256, the decode kernel's limit")
        parse_dtype(self.dtype)
        check_timer(self.timer)
        _check_list("rep_ms", [self.rep_ms], positive=True)
        device = resolve_device(self.device)
        if self.ncu is not None:
            try:
                find_ncu(self.ncu)
            except NcuError as exc:
                raise ValueError(f"ncu: {exc}") from None
            if device.type != "cuda":
                raise ValueError(f"ncu: Nsight Compute measures CUDA devices; device is "
                                 f"{self.device!r}")
        return self


def kv_bytes(batch, cache_len, heads_kv, head_dim, element_size):
    """Bytes of the K and V caches: what one decode step reads at the least."""
    return 2 * batch * cache_len * heads_kv * head_dim * element_size


def step_bytes(batch, cache_len, heads, heads_kv, head_dim, element_size):
    """HBM bytes of one decode step: K and V read once, q read, out written."""
    return (kv_bytes(batch, cache_len, heads_kv, head_dim, element_size)
            + 2 * batch * heads * head_dim * element_size)


def decode_inputs(batch, cache_len, heads, heads_kv, head_dim, dtype, device, seed):
    """q (B, 1, Hq, d), caches (B, L, Hkv, d) and the step's k, v (B, 1, Hkv, d), already in the
    caches' last slot so that every implementation attends the same keys."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, dtype=dtype, device=device, generator=gen)
    q = draw(batch, 1, heads, head_dim)
    k_cache, v_cache = draw(batch, cache_len, heads_kv, head_dim), draw(batch, cache_len,
                                                                        heads_kv, head_dim)
    k, v = k_cache[:, -1:].clone(), v_cache[:, -1:].clone()
    return q, k_cache, v_cache, k, v


def group_queries(q, heads_kv):
    """q (B, 1, Hq, d) as (B, Hkv, Hq / Hkv, d), a view: the query heads sharing a K/V head as
    that head's query rows."""
    batch, _, heads, head_dim = q.shape
    return q.view(batch, heads_kv, heads // heads_kv, head_dim)


def materialized_decode(q, k_cache, v_cache):
    """Decode attention the textbook way: scores materialized, softmax in float32."""
    qg = group_queries(q, k_cache.shape[2])
    scores = torch.matmul(qg, k_cache.permute(0, 2, 3, 1)) * q.shape[-1] ** -0.5
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v_cache.transpose(1, 2)).reshape(q.shape)


def build_step(name, q, k_cache, v_cache, k, v):
    """A no-argument function running implementation `name` on these inputs, (B, 1, Hq, d)."""
    if name == "flash_decode":
        from kernels import flash_attn_with_kvcache
        lens = k_cache.shape[1] - 1
        return lambda: flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens)
    if name == "materialized":
        return lambda: materialized_decode(q, k_cache, v_cache)
    qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    gqa = q.shape[2] != k_cache.shape[2]
    if name == "flex":
        flex = flex_attention_fn(q.device)
        return lambda: flex(qt, kt, vt, enable_gqa=gqa).transpose(1, 2)
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, SDPA_BACKENDS[name])
    if name in GROUPED_QUERY_SDPA:
        qg = group_queries(q, k_cache.shape[2])

        def grouped():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qg, kt, vt).reshape(q.shape)
        return grouped

    def sdpa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=gqa).transpose(1, 2)
    return sdpa


def reference_step(inputs):
    """float64 output of batch element 0 (kernels.reference_attention_with_kvcache)."""
    from kernels import reference_attention_with_kvcache
    q, k_cache, v_cache = (x[:1] for x in inputs[:3])
    return reference_attention_with_kvcache(q, k_cache, v_cache)


def measure_step(name, inputs, config, device, reference=None):
    """ROW_KEYS of implementation `name` on `inputs`, its batch element 0 checked against
    `reference` (unless None); failures become a status and a reason."""
    row = dict.fromkeys(ROW_KEYS)
    try:
        with captured_warnings() as caught:
            try:
                with torch.no_grad():
                    fn = build_step(name, *inputs)
                    if reference is not None:
                        out = fn()[:1]
                        err = relative_error(out, reference.to(out.device))
                        row.update(check_rel_err=err,
                                   check_passed=bool(err <= CHECK_TOLERANCE[config.dtype]))
                        if not row["check_passed"]:
                            return row | {"status": "incorrect", "reason": (
                                f"relative error {row['check_rel_err']:.3g} against the float64 "
                                "reference; not timed")}
                    row.update(bench_time(fn, device, config.warmup_ms, config.rep_ms,
                                          timer=config.timer))
                    row["host_ms"] = host_time(fn, device)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a row
                status, reason = classify(exc, caught)
                return row | {"status": status, "reason": reason}
        return row | {"status": "ok"}
    finally:
        free_memory(device)


def dram_bytes(name, shape, config, profiler=profile_worker):
    """DRAM_KEYS of one step of implementation `name` at `shape` (batch, cache_len, heads,
    heads_kv, head_dim) measured by `profiler` (ncu over io_worker decode); a failed measurement
    leaves the numbers None and says why in ncu_note."""
    args = ["decode", "--impl", name, "--batch", str(shape["batch"]),
            "--cache-len", str(shape["cache_len"]), "--heads", str(shape["heads"]),
            "--heads-kv", str(shape["heads_kv"]), "--head-dim", str(shape["head_dim"]),
            "--dtype", config.dtype, "--seed", str(config.seed)]
    try:
        res = profiler(args, ncu=config.ncu)
    except (NcuError, OSError) as exc:
        return dict.fromkeys(DRAM_KEYS) | {"ncu_note": str(exc)[:600]}
    read, write = (res.get(metric) for metric in METRICS)
    if read is None:
        return dict.fromkeys(DRAM_KEYS) | {"ncu_note": f"ncu reported no {METRICS[0]}"}
    ideal = kv_bytes(shape["batch"], shape["cache_len"], shape["heads_kv"], shape["head_dim"],
                     parse_dtype(config.dtype).itemsize)
    return {"dram_read_bytes": read, "dram_write_bytes": write, "read_over_ideal": read / ideal,
            "ncu_kernels": res.get("kernels"), "ncu_note": None}


def run_decode_bench(config, profiler=profile_worker):
    """Run the decode benchmark; returns the rows (one per impl x shape). With config.ncu each
    step that ran also gets DRAM_KEYS from `profiler` (dram_bytes)."""
    if isinstance(config, dict):
        config = DecodeBenchConfig(**config)
    config.validate()
    device = resolve_device(config.device)
    dtype = parse_dtype(config.dtype)
    shapes = [(d, hs, b, n) for d in config.head_dims for hs in config.heads
              for b in config.batches for n in config.cache_lens]
    rows = []
    with make_progress(config.progress, len(shapes) * len(config.impls), "decode") as bar:
        for head_dim, heads_text, batch, cache_len in shapes:
            heads, heads_kv = parse_heads(heads_text)
            shape = {"batch": batch, "cache_len": cache_len, "heads": heads,
                     "heads_kv": heads_kv, "head_dim": head_dim}
            nbytes = step_bytes(batch, cache_len, heads, heads_kv, head_dim, dtype.itemsize)
            inputs = reference = None
            try:
                inputs = decode_inputs(batch, cache_len, heads, heads_kv, head_dim, dtype,
                                       device, config.seed)
                if config.check and cache_len <= CHECK_MAX_SEQLEN:
                    reference = reference_step(inputs)
            except Exception as exc:  # noqa: BLE001 - out of memory for the inputs
                status, reason = classify(exc)
                inputs = None
                free_memory(device)
            for name in config.impls:
                bar.describe(f"{name} d={head_dim} heads={heads_text} B={batch} L={cache_len}")
                measured = (measure_step(name, inputs, config, device, reference)
                            if inputs is not None
                            else dict.fromkeys(ROW_KEYS) | {"status": status, "reason": reason})
                gbps = nbytes / (measured["ms"] * 1e-3) / 1e9 if measured.get("ms") else None
                rows.append({"bench": "decode", "impl": name, **shape, "dtype": config.dtype,
                             "bytes": nbytes, "gb_per_s": gbps, "us": (
                                 measured["ms"] * 1e3 if measured.get("ms") else None),
                             **measured})
                if config.ncu is not None:
                    bar.describe(f"{name} d={head_dim} heads={heads_text} B={batch} "
                                 f"L={cache_len}: ncu")
                    rows[-1].update(
                        dram_bytes(name, shape, config, profiler) if measured["status"] == "ok"
                        else dict.fromkeys(DRAM_KEYS) | {
                            "ncu_note": f"not profiled: {measured['status']}"})
                bar.advance()
            del inputs, reference
    return rows


_INDEX = ("head_dim", "heads", "heads_kv", "batch", "cache_len")
DECODE_TABLES = (
    Table("Achieved HBM bandwidth, GB/s (K and V read once + q and out; higher is better)",
          _INDEX, "impl", "gb_per_s", ".0f"),
    Table("Time per decode step, µs (median)", _INDEX, "impl", "us", ".1f"),
    Table("Host time to issue one call, ms (where it reaches the step time, event timing measures "
          "the host)", _INDEX, "impl", "host_ms", ".3f"),
)
DRAM_TABLE = Table("DRAM bytes read / K and V bytes (Nsight Compute; 1.0: each K/V head read "
                   "once per group)", _INDEX, "impl", "read_over_ideal", ".2f")
CSV_COLUMNS = ("impl", "batch", "cache_len", "heads", "heads_kv", "head_dim", "dtype", "status",
               "us", "ms_p20", "ms_p80", "host_ms", "bytes", "gb_per_s", "check_rel_err",
               "reason")
DRAM_CSV_COLUMNS = ("dram_read_bytes", "dram_write_bytes", "read_over_ideal", "ncu_note")


def _measured_bytes(rows):
    return any("read_over_ideal" in r for r in rows)


def summary_table(rows):
    """The GB/s pivot (and the read_over_ideal one when bytes were measured) as Markdown, printed
    at the end of a command-line run."""
    tables = DECODE_TABLES[:1] + ((DRAM_TABLE,) if _measured_bytes(rows) else ())
    return "\n".join(pivot_markdown(rows, t) for t in tables)


def write_decode_reports(rows, out_dir, config, name="decode"):
    """decode.json, decode.md, decode.csv and a bandwidth plot under out_dir."""
    if isinstance(config, dict):
        config = DecodeBenchConfig(**config)
    notes = [
        f"One decode step: q (B, 1, Hq, d) over a cache of L tokens (B, L, Hkv, d), "
        f"{config.dtype}. Bytes: K and V read once + q and out (2·B·L·Hkv·d + 2·B·Hq·d "
        "elements); GB/s = bytes / median time.",
        "Timer: " + _TIMER_NOTES["cpu" if config.device == "cpu" else config.timer],
        f"Correctness guard: batch element 0 against the float64 reference at L <= "
        f"{CHECK_MAX_SEQLEN} (check_rel_err in the JSON and CSV).",
        f"GQA in SDPA: enable_gqa, except {', '.join(GROUPED_QUERY_SDPA)} (no enable_gqa): the "
        "query heads of each K/V head go in as its query rows (a view; K and V not copied).",
    ]
    tables, columns = DECODE_TABLES, CSV_COLUMNS
    if _measured_bytes(rows):
        tables, columns = (DRAM_TABLE,) + tables, columns + DRAM_CSV_COLUMNS
        notes.append("DRAM bytes: ncu dram__bytes_read.sum / dram__bytes_write.sum over the "
                     "step's kernels, one step in a worker process, caches flushed before every "
                     "kernel (--cache-control all); read_over_ideal = read / K and V bytes "
                     "(2·B·L·Hkv·d elements). K and V within L2 (50 MB on an H100) may hide "
                     "re-reads.")
        failures = Counter(r["ncu_note"] for r in rows if r.get("ncu_note"))
        notes += [f"- not measured ({n} rows): {note}" for note, n in failures.items()]
    plots = [Plot("decode_bandwidth.png", "cache_len", "gb_per_s", ("impl",),
                  ("head_dim", "heads", "heads_kv", "batch"), {}, "decode step bandwidth",
                  "cache length L", "GB/s", logy=False)]
    paths = write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                          asdict(config), tables, plots, notes)
    csv_path = paths["json"].with_suffix(".csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v))
                                 else v) for k, v in r.items()})
    paths["csv"] = csv_path
    return paths
