"""Sweep tile configurations of the attention kernels on a GPU and print the fastest per case.

Usage: python research/kernel_probes/tune_attention.py OUT_DIR [--seqlen 4096] [--head-dims 64,128]
                                         [--kinds fwd,dkdv,dq,dkdv_atomic] [--causal 0,1]
                                         [--butterfly K | --layout JSON | --window W]
                                         [--dropout P]
                                         [--batch B] [--heads H]
                                         [--tma | --loads ptr,tma,host] [--max-tiles N]
                                         [--rounds R]
Shapes default to batch x seqlen = 16K tokens and heads x head_dim = 2048 (the benchmark's);
--batch and --heads set them (GPT-2 small: --batch 16 --heads 12 --seqlen 1024).
--butterfly K times the block-sparse kernels over a butterfly layout of K factors at 128-token
blocks (tiles then fit in the layout's blocks); --layout over any kernels.layouts.LayoutSpec,
given as JSON of its fields (block_size 128 unless named); --window W times the dense kernels with a
sliding window of W keys each side (TFLOP/s on the kept pairs); --dropout P times them with
dropout (one seed);
--tma loads the swept kernels' streamed tiles through TMA descriptors that each program makes (the
reference configs stay on pointer loads); --loads sweeps every tile in each listed way: ptr
(pointer loads), tma (per-program descriptors), host (the launcher's descriptors).
--max-tiles N sweeps the first N tiles of each list; --rounds R times every configuration R times
in turn and keeps the median.
Writes OUT_DIR/tune.json; the chosen table goes into kernels/tuning.py by hand review.
"""
import argparse
import json
import pathlib
import statistics
from dataclasses import asdict

import torch
import triton

from kernels import BlockSparseIndex, tuning
from kernels.attention_launch import AttentionProblem, backward, forward
from kernels.layouts import LayoutSpec
from fa_train.bench.attention import window_density
from fa_train.metrics.flops import attention_flops

# (BLOCK_M, BLOCK_N, num_warps, num_stages); the first of each list is the reference
FWD = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (64, 64, 4, 3),
       (128, 64, 4, 3), (64, 128, 4, 3), (128, 128, 8, 4), (128, 64, 8, 2), (64, 64, 4, 2),
       (64, 32, 4, 3), (64, 64, 4, 4)]
DKDV = [(64, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 8, 3), (32, 64, 4, 3),
        (64, 64, 4, 4), (128, 64, 8, 3), (32, 128, 4, 3), (128, 128, 8, 2), (64, 64, 4, 2),
        (32, 64, 4, 4), (64, 32, 4, 3)]
# the dK/dV kernel that also adds dQ with atomics (deterministic=False) holds more registers
DKDV_ATOMIC = [(64, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 3), (64, 64, 8, 3),
               (128, 64, 8, 2)]
DQ = [(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 64, 8, 4), (128, 32, 4, 3),
      (64, 64, 4, 4), (128, 64, 4, 3), (64, 128, 4, 3), (128, 64, 8, 2), (64, 32, 4, 3),
      (64, 64, 4, 2)]


LOADS = {"ptr": tuning.POINTER_LOADS, "tma": tuning.PROGRAM_DESCRIPTORS,
         "host": tuning.HOST_DESCRIPTORS}

LOAD_NAMES = {mode: name for name, mode in LOADS.items()}


def cfg(t, tma=tuning.POINTER_LOADS):
    return {"BLOCK_M": t[0], "BLOCK_N": t[1], "num_warps": t[2], "num_stages": t[3], "TMA": tma}


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def candidates(args, tables):
    """(kind, tile, tma) of every swept configuration, in sweep order."""
    loads = [LOADS[name] for name in args.loads.split(",")]
    return [(kind, t, tma) for kind in args.kinds.split(",")
            for t in tables[kind][:args.max_tiles or None] for tma in loads]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--kinds", default="fwd,dkdv,dq,dkdv_atomic")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--butterfly", type=int, default=0, help="factors of a butterfly layout (0: dense)")
    ap.add_argument("--layout", type=json.loads, default=None,
                    help='LayoutSpec fields as JSON, e.g. \'{"n_factors": 2, "local_window": 1}\'')
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    ap.add_argument("--window", type=int, default=0,
                    help="sliding window, keys each side of the diagonal (0: none)")
    ap.add_argument("--batch", type=int, default=0, help="batch size (0: 16K tokens / seqlen)")
    ap.add_argument("--heads", type=int, default=0, help="heads (0: 2048 / head dim)")
    ap.add_argument("--tma", action="store_true", help="same as --loads tma")
    ap.add_argument("--loads", default="ptr", help="comma list of ptr, tma and host")
    ap.add_argument("--max-tiles", type=int, default=0, help="sweep the first N tiles of each list")
    ap.add_argument("--rounds", type=int, default=1,
                    help="timing rounds over all configurations (median kept)")
    args = ap.parse_args()
    if args.tma:
        args.loads = "tma"
    if args.window and (args.butterfly or args.layout is not None):
        ap.error("--window times the dense kernels: give it without --butterfly and --layout")
    if args.butterfly and args.layout is not None:
        ap.error("give --butterfly or --layout, not both")
    spec = None
    if args.butterfly or args.layout is not None:
        fields = {"n_factors": args.butterfly} if args.butterfly else args.layout
        try:
            spec = LayoutSpec(**{"block_size": 128, **fields})
        except (TypeError, ValueError) as exc:
            ap.error(f"--layout: {exc}")
    if not set(args.loads.split(",")) <= set(LOADS):
        ap.error(f"--loads takes {', '.join(LOADS)}, got {args.loads!r}")
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    n = args.seqlen
    tables = {"fwd": FWD, "dkdv": DKDV, "dq": DQ, "dkdv_atomic": DKDV_ATOMIC}
    for d in map(int, args.head_dims.split(",")):
        heads, batch = args.heads or 2048 // d, args.batch or max(1, 16384 // n)
        for causal in (c == "1" for c in args.causal.split(",")):
            torch.manual_seed(0)
            q, k, v = [torch.randn(batch, n, heads, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3)]
            do = torch.randn_like(q)
            sparse, density = None, 1.0
            if spec is not None:
                layout = spec.build(n)
                sparse = BlockSparseIndex.from_layout(layout, spec.block_size, n, n, causal,
                                                      q.device)
                density = layout.float().mean().item()
            seed = torch.tensor([1234], device="cuda", dtype=torch.int64)
            window = (args.window, args.window) if args.window else (-1, -1)
            if args.window:
                density = window_density(n, args.window, causal) / (0.5 if causal else 1.0)
            prob = AttentionProblem(q, k, sm_scale=d ** -0.5, causal=causal,
                                    dropout_p=args.dropout, seed=seed, sparse=sparse,
                                    window=window)
            ref_o, ref_lse = forward(q, k, v, prob, cfg(FWD[0]))
            ref_g = backward(do, q, k, v, ref_o, ref_lse, prob, configs=(cfg(DKDV[0]), cfg(DQ[0])))
            fl_f = density * attention_flops(batch, n, n, heads, d, causal, "fwd")

            def call(kind, t, tma):
                swept = cfg(t, tma)
                if kind == "fwd":
                    return lambda: forward(q, k, v, prob, swept)[:1]
                cfgs = (cfg(DKDV[0]), swept) if kind == "dq" else (swept, cfg(DQ[0]))
                return lambda: backward(do, q, k, v, ref_o, ref_lse, prob, configs=cfgs,
                                        atomic=kind == "dkdv_atomic")

            timed = []
            for kind, t, tma in candidates(args, tables):
                row = dict(d=d, causal=causal, kind=kind, cfg=t, tma=tma)
                try:
                    fn = call(kind, t, tma)
                    ref = [ref_o] if kind == "fwd" else ref_g
                    row["maxdiff"] = max((a.float() - b.float()).abs().max().item()
                                         for a, b in zip(fn(), ref))
                except Exception as exc:  # noqa: BLE001 - a config that fails to compile is a result
                    row["error"] = str(exc)[:200]
                    print(d, causal, kind, t, LOAD_NAMES[tma], "ERROR", str(exc)[:100],
                          flush=True)
                else:
                    row["all_ms"] = []
                    timed.append((row, fn))
                rows.append(row)
            # every round times each configuration once, so drifting clocks touch all alike
            for _ in range(args.rounds):
                for row, fn in timed:
                    row["all_ms"].append(bench(fn))
            for row, _ in timed:
                row["ms"] = statistics.median(row["all_ms"])
                row["tflops"] = fl_f / row["ms"] / 1e9 if row["kind"] == "fwd" else None
                print(d, causal, row["kind"], row["cfg"], LOAD_NAMES[row["tma"]],
                      f"{row['ms']:.3f} ms", f"{row['tflops']:.0f} TF/s" if row["tflops"] else "",
                      f"diff {row['maxdiff']:.3g}", flush=True)
            # dense peers for orientation
            qt, kt, vt = [x.transpose(1, 2) for x in (q, k, v)]
            from torch.nn.attention import SDPBackend, sdpa_kernel
            peers = (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))
            for name, be in peers if spec is None and not args.window else ():
                with sdpa_kernel(be):
                    f = lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    ms = bench(f)
                    rows.append(dict(d=d, causal=causal, kind=name, ms=ms, tflops=fl_f / ms / 1e9))
                    print(d, causal, name, f"fwd {ms:.3f} ms {fl_f / ms / 1e9:.0f} TF/s", flush=True)
            best = {}
            for r in rows:
                if r["d"] == d and r["causal"] == causal and "ms" in r and r["kind"] in tables:
                    if r["kind"] not in best or r["ms"] < best[r["kind"]]["ms"]:
                        best[r["kind"]] = r
            # each backward row times a whole backward
            print(f"BEST d={d} causal={causal}: " + "; ".join(
                f"{kind} {r['cfg']} {LOAD_NAMES[r['tma']]} {r['ms']:.3f} ms"
                for kind, r in best.items()), flush=True)
            # written after every case, so that a run stopped early keeps what it measured
            (out_dir / "tune.json").write_text(json.dumps(dict(
                device=torch.cuda.get_device_name(), seqlen=n, batch=args.batch, heads=args.heads,
                butterfly=args.butterfly, layout=asdict(spec) if spec else None,
                window=args.window or None,
                dropout=args.dropout, loads=args.loads,
                rounds=args.rounds, rows=rows), indent=1))


if __name__ == "__main__":
    main()
