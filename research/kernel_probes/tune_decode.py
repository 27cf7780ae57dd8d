"""Sweep the decode kernel's tiles and split counts on a GPU and print the fastest per shape.

Usage: python research/kernel_probes/tune_decode.py OUT_DIR [--batches 1,8]
           [--cache-lens 4096,16384,65536] [--heads 32:8,32:32] [--head-dims 64,128]
           [--block-n 32,64,128] [--stages 2,3,4] [--warps 4,8]
           [--split-factors 0.5,2,4] [--top-tiles 3] [--rounds 3] [--rep-ms 5]
           [--dtype bf16] [--device cuda]

The step is fa-bench decode's (fa_train.bench.decode: decode_inputs, step_bytes, the bench timer
with CUDA graphs): q (B, 1, Hq, d) over L cached tokens, the step's k/v appended in place at
L - 1, GB/s = step bytes / median time. Per shape it times, through flash_attn_with_kvcache's
sweep-only `tiles` keyword:
  1. the default launch (the kernel's own tiles and split count), the reference of every row;
  2. every tile (--block-n x --stages x --warps) at the automatic split count;
  3. the --top-tiles fastest tiles of step 2, and the default tile, at --split-factors x the
     default's split count (clipped to 1 .. one split per key tile; counts the kernel rounds to
     one already timed for that tile are skipped).
Each configuration's output is compared with the default's (max abs diff, at most fa-bench's
tolerance x the largest output) and, at L <= CHECK_MAX_SEQLEN, batch element 0 with the float64
reference (fa-bench's relative tolerance); one that fails is kept in the rows, marked incorrect,
never reported best. The tile equal to the default's is timed again in step 2: the spread of the
two is the noise. Each timing round times every configuration of a step once (median of --rounds
kept). Graph replays do not flush L2 (as in fa-bench's cuda-graph timer), so caches within its
50 MB read faster than HBM. A pipeline too deep for shared memory runs with fewer stages (the
launcher lowers them), so its row repeats a shallower one.

Bound: the default grid is 24 shapes x at most 31 configurations (1 + 18 tiles + 4 tiles x 3
factors) x 3 rounds, about 2,200 timings of 10 graph replays of 5 ms, plus about 150 kernel
compilations (18 tiles x d x GQA group x split or not); the printed estimate (5.5 minutes on
an H100) counts 50 ms a timing and 1.5 s a compilation. --top-tiles, the tile lists and --rounds
shrink it.
Writes OUT_DIR/tune_decode.json (rows + the environment) after every shape.

Run 2026-12-02 on one NVIDIA H200 (torch 2.11, triton 3.6; reports/bench/decode_tune/): the
default launch was within 10% of the best configuration at every shape, the gains did not agree
between shapes, and the defaults stayed (kernels/NOTES.md, Decode).
"""
import argparse
import json
import math
import pathlib
import statistics
import sys

import torch

from fa_train.bench.common import (CHECK_MAX_SEQLEN, CHECK_TOLERANCE, bench_time, environment,
                                   free_memory, parse_dtype, relative_error, resolve_device)
from fa_train.bench.decode import decode_inputs, parse_heads, reference_step, step_bytes
from kernels import flash_attn_with_kvcache
from kernels.decode import launch_plan
from kernels.decode_inputs import MAX_DECODE_HEAD_DIM, TILE_KEYS, check_tiles

SECONDS_PER_TIMING = 0.05
SECONDS_PER_COMPILE = 1.5


def _ints(name, text, minimum=1):
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(f"{name}: {text!r} must be a comma list of ints >= "
                                         f"{minimum}")
    return values


def parse_args(argv=None):
    """The command line, its lists parsed and checked (one error line naming the option)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--cache-lens", default="4096,16384,65536")
    ap.add_argument("--heads", default="32:8,32:32", help="comma list of HQ:HKV")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--block-n", default="32,64,128", help="keys per tile")
    ap.add_argument("--stages", default="2,3,4", help="pipeline stages")
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--split-factors", default="0.5,2,4",
                    help="split counts of step 3, as multiples of the default's")
    ap.add_argument("--top-tiles", type=int, default=3,
                    help="fastest tiles swept over split counts (besides the default tile)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (median kept)")
    ap.add_argument("--rep-ms", type=float, default=5.0, help="GPU ms per CUDA-graph replay")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    try:
        for name in ("batches", "cache_lens", "head_dims", "block_n", "stages", "warps"):
            setattr(args, name, _ints("--" + name.replace("_", "-"), getattr(args, name)))
        args.heads = [parse_heads(h) for h in args.heads.split(",")]
        if max(args.head_dims) > MAX_DECODE_HEAD_DIM:
            raise ValueError(f"--head-dims: {max(args.head_dims)} is above "
                             f"{MAX_DECODE_HEAD_DIM}, the decode kernel's limit")
        try:
            args.split_factors = [float(x) for x in args.split_factors.split(",")]
        except ValueError:
            args.split_factors = [0.0]
        if min(args.split_factors) <= 0:
            raise ValueError("--split-factors: must be a comma list of numbers > 0")
        for name in ("top_tiles", "rounds"):
            if getattr(args, name) < (0 if name == "top_tiles" else 1):
                raise ValueError(f"--{name.replace('_', '-')}: {getattr(args, name)} is out "
                                 f"of range (>= {0 if name == 'top_tiles' else 1})")
        if args.rep_ms <= 0:
            raise ValueError(f"--rep-ms: {args.rep_ms} must be > 0")
        parse_dtype(args.dtype)
        args.tiles = tile_grid(args.block_n, args.stages, args.warps)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        ap.error(str(exc))
    return args


def tile_grid(block_ns, stages, warps):
    """Every tiles dict of the sweep, each checked as flash_attn_with_kvcache checks it."""
    return [check_tiles(dict(BLOCK_N=n, num_stages=s, num_warps=w))
            for n in block_ns for s in stages for w in warps]


def split_requests(default_splits, factors, keys, block_n):
    """num_splits to ask for: factor x the default's split count, rounded and clipped to
    1 .. ceil(keys / block_n) (one split per key tile)."""
    most = max(1, math.ceil(keys / block_n))
    return [min(most, max(1, round(f * default_splits))) for f in factors]


def shapes(args):
    """(batch, cache_len, heads, heads_kv, head_dim) of every swept shape."""
    return [(b, n, hq, hkv, d) for d in args.head_dims for hq, hkv in args.heads
            for b in args.batches for n in args.cache_lens]


def estimate_seconds(args):
    """A rough bound on the run: timings x SECONDS_PER_TIMING + compilations."""
    per_shape = 1 + len(args.tiles) + (min(args.top_tiles, len(args.tiles)) + 1) * len(
        args.split_factors)
    variants = {(d, hq // hkv) for _, _, hq, hkv, d in shapes(args)}
    return (len(shapes(args)) * per_shape * args.rounds * SECONDS_PER_TIMING
            + len(variants) * len(args.tiles) * 2 * SECONDS_PER_COMPILE)


def _time_all(configs, args, device, nbytes):
    """Time every configuration with an output once per round; fills ms and GB/s."""
    timed = [c for c in configs if "out" in c]
    with torch.no_grad():
        for _ in range(args.rounds):
            for c in timed:
                c["all_ms"].append(bench_time(c["fn"], device, rep_ms=args.rep_ms,
                                              timer="cuda-graph")["ms"])
    for c in timed:
        c["row"]["ms"] = statistics.median(c["all_ms"])
        c["row"]["gb_per_s"] = nbytes / (c["row"]["ms"] * 1e-3) / 1e9


def _config(inputs, row, tiles, num_splits, base, reference, tol):
    """A configuration: its row (launch, output checks) and a no-argument step function."""
    q, k_cache, v_cache, k, v = inputs
    lens = k_cache.shape[1] - 1
    plan = launch_plan(q.shape, k_cache.shape[2], k_cache.shape[1], q.device, num_splits, tiles)
    row.update(BLOCK_N=plan[0]["BLOCK_N"], num_stages=plan[0]["num_stages"],
               num_warps=plan[0]["num_warps"], num_splits=num_splits, splits=plan[2])

    def fn():
        return flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                       num_splits=num_splits, tiles=tiles)
    config = dict(row=row, fn=fn, all_ms=[], tiles={k: row[k] for k in TILE_KEYS})
    try:
        with torch.no_grad():
            config["out"] = fn()
    except Exception as exc:  # noqa: BLE001 - a config that fails to compile or launch is a result
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return config
    row["max_abs_diff"] = 0.0 if base is None else (  # base None: this is the default
        config["out"].float() - base.float()).abs().max().item()
    if reference is not None:
        row["ref_rel_err"] = relative_error(config["out"][:1], reference.to(q.device))
    scale = (config["out"] if base is None else base).float().abs().max().item()
    row["correct"] = row.get("ref_rel_err", 0.0) <= tol and row["max_abs_diff"] <= tol * scale
    return config


def sweep_shape(shape, args, device):
    """Rows of one shape: the default launch, every tile, the top tiles' split counts."""
    batch, cache_len, heads, heads_kv, head_dim = shape
    dtype = parse_dtype(args.dtype)
    nbytes = step_bytes(batch, cache_len, heads, heads_kv, head_dim, dtype.itemsize)
    inputs = decode_inputs(batch, cache_len, heads, heads_kv, head_dim, dtype, device, seed=0)
    reference = reference_step(inputs) if cache_len <= CHECK_MAX_SEQLEN else None
    tol = CHECK_TOLERANCE[args.dtype]
    info = dict(batch=batch, cache_len=cache_len, heads=heads, heads_kv=heads_kv,
                head_dim=head_dim, dtype=args.dtype, bytes=nbytes)
    default = _config(inputs, dict(info, step="default"), None, 0, None, reference, tol)
    if "out" not in default:
        raise RuntimeError(f"the default launch failed at {info}: {default['row']['error']}")
    base = default["out"]
    tiles = [_config(inputs, dict(info, step="tiles"), t, 0, base, reference, tol)
             for t in args.tiles]
    _time_all([default] + tiles, args, device, nbytes)
    ranked = sorted((c for c in tiles if c["row"].get("correct")), key=lambda c: c["row"]["ms"])
    chosen = [c["tiles"] for c in ranked[:args.top_tiles]]
    chosen += [] if default["tiles"] in chosen else [default["tiles"]]
    splits = []
    for t in chosen:
        seen = {c["row"]["splits"] for c in [default] + tiles if c["tiles"] == t}
        for request in split_requests(default["row"]["splits"], args.split_factors, cache_len,
                                      t["BLOCK_N"]):
            count = launch_plan(inputs[0].shape, heads_kv, cache_len, device, request, t)[2]
            if count not in seen:
                seen.add(count)
                splits.append(_config(inputs, dict(info, step="splits"), t, request, base,
                                      reference, tol))
    _time_all(splits, args, device, nbytes)
    rows = [c["row"] for c in [default] + tiles + splits]
    for r in rows:
        if "ms" in r:
            r["speedup"] = default["row"]["ms"] / r["ms"]
    del inputs, reference, default, tiles, splits
    free_memory(device)
    return rows


def print_table(rows):
    """One shape's rows (fastest first) and its best correct configuration."""
    head = rows[0]
    print(f"\nB={head['batch']} L={head['cache_len']} Hq={head['heads']} Hkv={head['heads_kv']} "
          f"d={head['head_dim']} {head['dtype']}")
    print(f"{'step':8} {'BLOCK_N':>7} {'stages':>6} {'warps':>5} {'splits':>6} {'GB/s':>7} "
          f"{'speedup':>7} {'max|diff|':>9} {'ref err':>8}")
    for r in sorted(rows, key=lambda r: r.get("ms", math.inf)):
        if "error" in r:
            print(f"{r['step']:8} {r['BLOCK_N']:7} {r['num_stages']:6} {r['num_warps']:5} "
                  f"{r['splits']:6} ERROR {r['error'][:80]}")
            continue
        print(f"{r['step']:8} {r['BLOCK_N']:7} {r['num_stages']:6} {r['num_warps']:5} "
              f"{r['splits']:6} {r['gb_per_s']:7.0f} {r['speedup']:7.3f} "
              f"{r['max_abs_diff']:9.2g} {r.get('ref_rel_err', math.nan):8.2g}"
              + ("" if r["correct"] else "  INCORRECT"))
    best = min((r for r in rows if r.get("correct")), key=lambda r: r["ms"], default=None)
    if best is None:
        print("BEST none: no configuration passed the checks", flush=True)
        return
    print(f"BEST BLOCK_N {best['BLOCK_N']} stages {best['num_stages']} warps "
          f"{best['num_warps']} splits {best['splits']}: {best['gb_per_s']:.0f} GB/s, "
          f"{best['speedup']:.3f}x the default", flush=True)


def main(argv=None):
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        sys.exit(f"--device: {exc}")
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(shapes(args))} shapes, {len(args.tiles)} tiles, {args.rounds} rounds: about "
          f"{estimate_seconds(args) / 60:.1f} min on an H100", flush=True)
    rows = []
    for shape in shapes(args):
        shape_rows = sweep_shape(shape, args, device)
        print_table(shape_rows)
        rows += shape_rows
        # written after every shape, so that a run stopped early keeps what it measured
        (out_dir / "tune_decode.json").write_text(json.dumps(dict(
            environment=environment(device),
            args={k: v for k, v in vars(args).items() if k != "tiles"}, rows=rows), indent=1))
    return rows


if __name__ == "__main__":
    main()
