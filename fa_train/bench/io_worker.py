"""One attention call inside a profiler region, for Nsight Compute (see fa_train.bench.ncu).

    ncu --profile-from-start off ... python -m fa_train.bench.io_worker --impl flash \
        --batch 64 --seqlen 1024 --heads 16 --head-dim 64 --dtype bf16 --pass fwd+bwd

Everything else (input creation, Triton autotuning and compilation, a warm-up call) runs outside
the region bracketed by torch.cuda.profiler.start() / stop() and an NVTX range.
"""
from __future__ import annotations

import argparse
import sys

import torch

from fa_train.bench.common import DTYPES, PASSES, parse_dtype
from fa_train.bench.impls import Case, default_impls


def build_parser():
    p = argparse.ArgumentParser(prog="python -m fa_train.bench.io_worker")
    p.add_argument("--impl", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", type=int, default=0, choices=[0, 1])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--pass", dest="pass_name", default="fwd+bwd", choices=PASSES)
    p.add_argument("--warmup", type=int, default=2, help="calls before the profiled one")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    impls = default_impls()
    if args.impl not in impls:
        raise SystemExit(f"--impl must be one of {sorted(impls)}, got {args.impl!r}")
    if not torch.cuda.is_available():
        raise SystemExit("io_worker needs a CUDA GPU")
    device = torch.device("cuda")
    dtype = parse_dtype(args.dtype)
    case = Case(args.batch, args.seqlen, args.heads, args.head_dim, bool(args.causal), 0.0, False,
                dtype, device)
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(args.batch, args.seqlen, args.heads, args.head_dim, dtype=dtype,
                           device=device, generator=gen) for _ in range(3))
    impl = impls[args.impl]
    impl.check_support(case)
    built = impl.build(case, q, k, v, 0.0)
    from fa_train.bench.runner import pass_fn
    fn = pass_fn(built, args.pass_name)
    for _ in range(args.warmup):
        fn()
        for leaf in built.leaves:
            leaf.grad = None
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push("fa_bench_region")
    fn()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
