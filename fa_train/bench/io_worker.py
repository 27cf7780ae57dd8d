"""One attention call or decode step in a profiler region, for Nsight Compute (bench.ncu).

    ncu --profile-from-start off ... python -m fa_train.bench.io_worker attention --impl flash \
        --batch 64 --seqlen 1024 --heads 16 --head-dim 64 --dtype bf16 --pass fwd+bwd
    ncu --profile-from-start off ... python -m fa_train.bench.io_worker decode --impl flash_decode \
        --batch 1 --cache-len 65536 --heads 32 --heads-kv 8 --head-dim 128 --dtype bf16

attention: one pass of a fa_train.bench.impls implementation; decode: one step of a
fa_train.bench.decode implementation (decode_inputs + build_step). Everything else (input creation,
Triton autotuning and compilation, warm-up calls) runs outside the region bracketed by
torch.cuda.profiler.start() / stop() and an NVTX range.
"""
from __future__ import annotations

import argparse
import sys

import torch

from fa_train.bench.common import DTYPES, PASSES, parse_dtype


def build_parser():
    from fa_train.bench.decode import DECODE_IMPL_NAMES
    parser = argparse.ArgumentParser(prog="python -m fa_train.bench.io_worker")
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("attention", "decode"):
        p = sub.add_parser(mode)
        p.add_argument("--impl", required=True,
                       choices=DECODE_IMPL_NAMES if mode == "decode" else None)
        p.add_argument("--batch", type=int, default=64 if mode == "attention" else 1)
        p.add_argument("--heads", type=int, default=16 if mode == "attention" else 32)
        p.add_argument("--head-dim", type=int, default=64 if mode == "attention" else 128)
        p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
        p.add_argument("--warmup", type=int, default=2, help="calls before the profiled one")
        if mode == "attention":
            p.add_argument("--seqlen", type=int, default=1024)
            p.add_argument("--causal", type=int, default=0, choices=[0, 1])
            p.add_argument("--pass", dest="pass_name", default="fwd+bwd", choices=PASSES)
        else:
            p.add_argument("--cache-len", type=int, default=65536, help="cached tokens L")
            p.add_argument("--heads-kv", type=int, default=8, help="K/V heads (divides --heads)")
            p.add_argument("--seed", type=int, default=0)
    return parser


def attention_call(args, device):
    """One pass (args.pass_name) of implementation args.impl, gradients cleared after each call."""
    from fa_train.bench.impls import Case, default_impls
    from fa_train.bench.runner import pass_fn
    impls = default_impls()
    if args.impl not in impls:
        raise SystemExit(f"--impl must be one of {sorted(impls)}, got {args.impl!r}")
    dtype = parse_dtype(args.dtype)
    case = Case(args.batch, args.seqlen, args.heads, args.head_dim, bool(args.causal), 0.0, False,
                dtype, device)
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(args.batch, args.seqlen, args.heads, args.head_dim, dtype=dtype,
                           device=device, generator=gen) for _ in range(3))
    impl = impls[args.impl]
    impl.check_support(case)
    built = impl.build(case, q, k, v, 0.0)
    fn = pass_fn(built, args.pass_name)

    def call():
        fn()
        for leaf in built.leaves:
            leaf.grad = None
    return call


def decode_call(args, device):
    """One decode step of implementation args.impl (no autograd), returning its output."""
    from fa_train.bench.decode import build_step, decode_inputs, parse_heads
    heads, heads_kv = parse_heads(f"{args.heads}:{args.heads_kv}")
    inputs = decode_inputs(args.batch, args.cache_len, heads, heads_kv, args.head_dim,
                           parse_dtype(args.dtype), device, args.seed)
    step = build_step(args.impl, *inputs)

    def call():
        with torch.no_grad():
            return step()
    return call


def build_call(args, device):
    """The no-argument function to profile, built (inputs included) on `device`."""
    return (decode_call if args.mode == "decode" else attention_call)(args, device)


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("io_worker needs a CUDA GPU")
    fn = build_call(args, torch.device("cuda"))
    for _ in range(args.warmup):
        fn()
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
