"""fa-bench: attention benchmarks (paper Figures 2 and 3), training and generation throughput. Every
subcommand takes --out DIR.

  fa-bench attention   --out DIR [--impls ...] [--seqlens ...] [--head-dims 64,128] [--causal 0,1]
                       [--dropout 0.0] [--padding] [--passes fwd,bwd,fwd+bwd] [--dtype bf16]
                       [--tokens 16384] [--hidden 2048] [--timer events|cuda-graph] [--quick]
                       [--device cuda] [--window W (local, flex, flash at N = 1K..32K)]
                       [--repeats 1 (each cell R times, impls alternating; median, min, max)]
  fa-bench blocksparse --out DIR [--seqlens 4096,16384,65536] [--head-dims 64,128]
                       [--factors 1,2,3,4 | --densities 0.1,0.25,0.5,1.0 | --layouts JSON]
                       [--block 128] [--dropout 0.0]
  fa-bench blocksize   --out DIR [--blocks 16,32,64,128,256 or MxN tokens]
  fa-bench io          --out DIR [--impls standard,flash] [--no-ncu]
  fa-bench decode      --out DIR [--impls ...] [--batches 1,2,4,8] [--cache-lens 1024,...,131072]
                       [--heads 32:32,32:8] [--head-dims 64,128] [--timer events|cuda-graph]
                       [--quick] [--ncu [EXE] (DRAM bytes per step, Nsight Compute)]
  fa-bench train-step  --out DIR [--models gpt2-small,gpt2-medium] [--impls standard,sdpa,flash]
                       [--compile 0,1] [--runners bare,trainer] [--batch 16] [--seqlen 1024]
                       [--losses auto,fused,torch] [--norms auto,fused,torch] [--steps 20]
                       [--profile]
  fa-bench generate    --out DIR [--model gpt2-small | --checkpoint RUN_OR_HF_DIR]
                       [--impls flash,sdpa] [--prompt-len 128] [--new-tokens 256] [--no-hf]
                       [--no-graph]
"""
from __future__ import annotations

import argparse
import json
import sys

from fa_train.bench.common import DTYPES, PASSES


def _list(kind, name):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{name} needs at least one value")
        out = []
        for item in items:
            try:
                out.append(kind(item))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{name}: {item!r} is not a valid {kind.__name__}") from None
        return out
    return parse


def _words(name):
    return _list(str, name)


def _json_list(name):
    def parse(text):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{name}: not JSON ({exc})") from None
        if not isinstance(value, list) or not value:
            raise argparse.ArgumentTypeError(f"{name} needs a non-empty JSON list")
        return value
    return parse


def _add_common(p, quick=True):
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (harness checks only)")
    p.add_argument("--warmup-ms", type=int, default=25, help="do_bench warm-up (ms)")
    p.add_argument("--rep-ms", type=int, default=100, help="do_bench repetition time (ms)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="skip the float64 correctness guard")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    if quick:
        p.add_argument("--quick", action="store_true",
                       help="fewer shapes and shorter timing (a few minutes on one GPU)")


def build_parser():
    parser = argparse.ArgumentParser(prog="fa-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    from fa_train.bench.impls import BASELINE_IMPL_NAMES, KNOWN_IMPL_NAMES, WINDOW_IMPL_NAMES
    p = sub.add_parser("attention", help="dense attention runtime, TFLOP/s, memory (Figure 3)")
    _add_common(p)
    p.add_argument("--impls", type=_words("--impls"), default=None,
                   help=f"comma list from {','.join(KNOWN_IMPL_NAMES)} (default: the exact ones but "
                        f"local; with --window {','.join(WINDOW_IMPL_NAMES)}); the approximate "
                        f"baselines {','.join(BASELINE_IMPL_NAMES)} run only when named")
    p.add_argument("--seqlens", type=_list(int, "--seqlens"), default=None,
                   help="comma list (default 128,...,65536; --quick 512,2048,8192)")
    p.add_argument("--head-dims", type=_list(int, "--head-dims"), default=[64, 128])
    p.add_argument("--causal", type=_list(int, "--causal"), default=[0, 1], help="0,1")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    p.add_argument("--padding", action="store_true", help="key padding mask (Figure 3 variant)")
    p.add_argument("--passes", type=_words("--passes"), default=list(PASSES),
                   help="comma list from fwd,bwd,fwd+bwd")
    p.add_argument("--tokens", type=int, default=16384, help="batch x seqlen")
    p.add_argument("--hidden", type=int, default=2048, help="heads x head_dim")
    p.add_argument("--timer", default="events", choices=["events", "cuda-graph"],
                   help="events: CUDA events per call (host time included where it dominates); "
                        "cuda-graph: calls replayed from a CUDA graph (GPU time alone)")
    p.add_argument("--window", type=int, default=None,
                   help="sliding window, keys each side of the diagonal: local (ours) and flex "
                        "compute it, the other impls full attention (default N = 1K..32K)")
    p.add_argument("--repeats", type=int, default=1,
                   help="measure each cell this many times, the impls alternating (A, B, A, "
                        "B, ...); rows hold the median, ms_min and ms_max")

    p = sub.add_parser("blocksparse", help="block-sparse runtime vs density (Figure 2 right)")
    _add_common(p)
    p.add_argument("--seqlens", type=_list(int, "--seqlens"), default=None,
                   help="default 4096,16384,65536 (--quick 4096,16384)")
    p.add_argument("--head-dims", type=_list(int, "--head-dims"), default=[64, 128])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--factors", type=_words("--factors"), default=None,
                       help="butterfly factor counts k (ints or 'max'); default 1,2,3,4,max")
    group.add_argument("--densities", type=_list(float, "--densities"), default=None,
                       help="target densities in (0, 1]: butterfly + global blocks")
    group.add_argument("--layouts", type=_json_list("--layouts"), default=None,
                       help='JSON list of kernels.layouts.LayoutSpec fields, e.g. '
                            '\'[{"n_factors": 1, "local_window": 2}]\'')
    p.add_argument("--block", type=int, default=128, help="layout block size (tokens)")
    p.add_argument("--causal", type=_list(int, "--causal"), default=[0], help="0,1")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    p.add_argument("--impls", type=_words("--impls"), default=None,
                   help="comma list from blocksparse,flash,flex (default all)")
    p.add_argument("--passes", type=_words("--passes"), default=["fwd", "fwd+bwd"])
    p.add_argument("--tokens", type=int, default=65536,
                   help="batch x seqlen (default 64K: enough GPU work per call to hide host time)")
    p.add_argument("--hidden", type=int, default=2048)

    p = sub.add_parser("blocksize", help="forward runtime vs kernel block size (Figure 2 middle)")
    _add_common(p, quick=False)
    p.add_argument("--blocks", type=_words("--blocks"), default=["16", "32", "64", "128", "256"],
                   help="block sizes: B (block_m = block_n = B) or MxN")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", type=int, default=0, choices=[0, 1])

    p = sub.add_parser("io", help="GFLOPs, HBM bytes (Nsight Compute) and runtime (Figure 2 left)")
    _add_common(p, quick=False)
    p.add_argument("--impls", type=_words("--impls"), default=["standard", "flash"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", type=int, default=0, choices=[0, 1])
    p.add_argument("--passes", type=_words("--passes"), default=["fwd+bwd"])
    p.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute byte count")
    p.add_argument("--ncu", default="ncu", help="ncu executable")

    from fa_train.bench.decode import DECODE_IMPL_NAMES
    p = sub.add_parser("decode", help="KV-cache decode step: time and HBM GB/s vs cache length")
    _add_common(p)
    p.add_argument("--impls", type=_words("--impls"), default=list(DECODE_IMPL_NAMES),
                   help=f"comma list from {','.join(DECODE_IMPL_NAMES)}")
    p.add_argument("--batches", type=_list(int, "--batches"), default=None,
                   help="default 1,2,4,8 (--quick 1,8)")
    p.add_argument("--cache-lens", type=_list(int, "--cache-lens"), default=None,
                   help="cached tokens L (default 1024,...,131072; --quick 4096,16384,65536)")
    p.add_argument("--heads", type=_words("--heads"), default=None,
                   help="HQ:HKV pairs (default 32:32,32:8; --quick 32:8)")
    p.add_argument("--head-dims", type=_list(int, "--head-dims"), default=None,
                   help="default 64,128 (--quick 128)")
    p.add_argument("--timer", default="events", choices=["events", "cuda-graph"],
                   help="events: CUDA events per call; cuda-graph: GPU time alone")
    p.add_argument("--ncu", nargs="?", const="ncu", default=None, metavar="EXE",
                   help="also measure each step's DRAM bytes with Nsight Compute (EXE, default "
                        "ncu); the grid defaults to batch 1, L 16384,65536, heads 32:32,32:8, "
                        "head dim 128 (K and V larger than L2)")

    p = sub.add_parser("train-step", help="GPT-2 training tokens/s without the trainer")
    _add_common(p, quick=False)
    p.add_argument("--models", type=_words("--models"), default=["gpt2-small"])
    p.add_argument("--impls", type=_words("--impls"), default=["standard", "sdpa", "flash"])
    p.add_argument("--compile", type=_list(int, "--compile"), default=[0, 1], help="0,1")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default, reduce-overhead (CUDA graphs), max-autotune...")
    p.add_argument("--runners", type=_words("--runners"), default=["bare"],
                   help="bare (the training loop alone), trainer (through Lightning)")
    p.add_argument("--losses", type=_words("--losses"), default=["auto"],
                   help="GPT loss_impl: auto (fused on CUDA), fused (cross-entropy kernel), torch")
    p.add_argument("--norms", type=_words("--norms"), default=["auto"],
                   help="GPT norm_impl: auto (the LayerNorm kernels on CUDA for narrow rows), "
                        "fused (the kernels), torch")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps (compilation)")
    p.add_argument("--profile", action="store_true",
                   help="also profile 3 steps: GPU busy time and top kernels")

    p = sub.add_parser("generate", help="batch-1 generation tokens/s, ours vs transformers")
    _add_common(p, quick=False)
    p.add_argument("--model", default="gpt2-small", help="GPT-2 preset (random weights)")
    p.add_argument("--checkpoint", default=None,
                   help="an fa-train run or a Hugging Face GPT-2 directory instead of --model")
    p.add_argument("--impls", type=_words("--impls"), default=["flash", "sdpa"],
                   help="comma list from flash,sdpa,standard")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    p.add_argument("--no-graph", action="store_true",
                   help="skip the CUDA-graph decode rows (IMPL-graph; CUDA only)")
    p.add_argument("--prompt-text", default=None,
                   help="a text prompt in the checkpoint's tokenizer instead of a random one")
    p.add_argument("--draft", default=None,
                   help="a draft run (same vocabulary): adds speculative rows per --spec-trees")
    p.add_argument("--spec-trees", type=lambda s: s.split(";"), default=["1,1,1,1"],
                   help="draft trees, ';'-separated, each children per level (e.g. '1,1,1,1;2,2,1')")
    return parser


def _common_kwargs(args):
    return dict(dtype=args.dtype, device=args.device, warmup_ms=args.warmup_ms,
                rep_ms=args.rep_ms, seed=args.seed, check=not args.no_check,
                progress=not args.no_progress)


def configure(args):
    """(config, run, write) for a parsed command line; ValueError names a bad argument."""
    common = _common_kwargs(args)
    quick = getattr(args, "quick", False)
    if quick and args.warmup_ms == 25 and args.rep_ms == 100:
        common.update(warmup_ms=5, rep_ms=25)
    if args.command == "attention":
        from fa_train.bench import attention as mod
        from fa_train.bench.impls import ATTENTION_IMPL_NAMES, WINDOW_IMPL_NAMES
        windowed = args.window is not None
        seqlens = args.seqlens or list(mod.WINDOW_SEQLENS if windowed else
                                       mod.QUICK_SEQLENS if quick else mod.DEFAULT_SEQLENS)
        impls = args.impls or list(WINDOW_IMPL_NAMES if windowed else ATTENTION_IMPL_NAMES)
        config = mod.AttentionBenchConfig(
            impls=impls, seqlens=seqlens, head_dims=args.head_dims, causal=args.causal,
            dropout_p=args.dropout, padding=args.padding, passes=args.passes, tokens=args.tokens,
            hidden=args.hidden, timer=args.timer, window=args.window, repeats=args.repeats,
            **common)
        return config.validate(), mod.run_attention_bench, mod.write_attention_reports
    if args.command == "blocksparse":
        from fa_train.bench import blocksparse as mod
        config = mod.BlocksparseBenchConfig(
            seqlens=args.seqlens or ([4096, 16384] if quick else [4096, 16384, 65536]),
            head_dims=args.head_dims, factors=args.factors, densities=args.densities,
            layouts=args.layouts, block=args.block, causal=args.causal, dropout_p=args.dropout, passes=args.passes,
            tokens=args.tokens, hidden=args.hidden,
            **({"impls": args.impls} if args.impls else {}), **common)
        return config.validate(), mod.run_blocksparse_bench, mod.write_blocksparse_reports
    if args.command == "blocksize":
        from fa_train.bench import blocksize as mod
        config = mod.BlocksizeBenchConfig(
            blocks=args.blocks, batch=args.batch, seqlen=args.seqlen, heads=args.heads,
            head_dim=args.head_dim, causal=bool(args.causal), **common)
        return config.validate(), mod.run_blocksize_bench, mod.write_blocksize_reports
    if args.command == "io":
        from fa_train.bench import io as mod
        config = mod.IOBenchConfig(
            impls=args.impls, batch=args.batch, seqlen=args.seqlen, heads=args.heads,
            head_dim=args.head_dim, causal=bool(args.causal), passes=args.passes,
            ncu=None if args.no_ncu else args.ncu, **common)
        return config.validate(), mod.run_io_bench, mod.write_io_reports
    if args.command == "decode":
        from fa_train.bench import decode as mod
        grid = (mod.NCU_GRID if args.ncu is not None else
                {"batches": [1, 8], "cache_lens": list(mod.QUICK_CACHE_LENS), "heads": ["32:8"],
                 "head_dims": [128]} if quick else
                {"batches": [1, 2, 4, 8], "cache_lens": list(mod.DEFAULT_CACHE_LENS),
                 "heads": ["32:32", "32:8"], "head_dims": [64, 128]})
        config = mod.DecodeBenchConfig(
            impls=args.impls, batches=args.batches or grid["batches"],
            cache_lens=args.cache_lens or grid["cache_lens"], heads=args.heads or grid["heads"],
            head_dims=args.head_dims or grid["head_dims"], timer=args.timer, ncu=args.ncu,
            **common)
        return config.validate(), mod.run_decode_bench, mod.write_decode_reports
    if args.command == "train-step":
        from fa_train.bench import train_step as mod
        common.pop("warmup_ms"), common.pop("rep_ms"), common.pop("check")
        config = mod.TrainStepBenchConfig(
            models=args.models, impls=args.impls, compile=args.compile, runners=args.runners,
            losses=args.losses, norms=args.norms, batch=args.batch, seqlen=args.seqlen,
            vocab_size=args.vocab_size, steps=args.steps, warmup_steps=args.warmup_steps, profile=args.profile,
            compile_mode=args.compile_mode, **common)
        return config.validate(), mod.run_train_step_bench, mod.write_train_step_reports
    if args.command == "generate":
        from fa_train.bench import generate as mod
        common.pop("warmup_ms"), common.pop("rep_ms"), common.pop("check"), common.pop("progress")
        config = mod.GenerateBenchConfig(
            model=args.model, checkpoint=args.checkpoint, impls=args.impls,
            prompt_len=args.prompt_len, new_tokens=args.new_tokens, repeats=args.repeats,
            hf=not args.no_hf, graph=not args.no_graph, prompt_text=args.prompt_text,
            draft=args.draft, spec_trees=args.spec_trees, **common)
        return config.validate(), mod.run_generate_bench, mod.write_generate_reports
    raise AssertionError(args.command)  # pragma: no cover - argparse enforces the choices


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config, run, write = configure(args)
    except ValueError as exc:  # configuration errors name the argument; exit status 2
        parser.error(f"{args.command}: {exc}")
    rows = run(config)
    paths = write(rows, args.out, config)
    for path in paths.values():
        print(f"wrote {path}")
    if args.command == "decode":
        from fa_train.bench.decode import summary_table
        print(summary_table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
