"""A/B of block-sparse forward tiles at d = 128 on one GPU (kernels/NOTES.md, round 28).

The table's 64 x 64 tile (4 warps) against 128 x 128 and 128 x 64 (8 warps), all through the
launcher's TMA descriptors, alternated over several rounds in one process. Layouts: butterfly
layouts of k = 2, 4 and all factors at 128-token blocks, N = 4K, 16K and 64K at 64K tokens per
call and 16 heads; then the GPT-2 context sweep's kind of call (all factors, one global block,
causal, dropout 0.1) and a global block without a causal mask. Each variant's output is compared
with the table tile's (max abs difference; tiles change the order of the sums).

Usage: python research/blocksparse_tiles/ab_fwd_d128.py OUT_DIR [--rounds 5]
Writes OUT_DIR/ab_fwd_d128.json and prints a table.
"""
import argparse
import json
import pathlib
import statistics

import torch
import triton

from kernels import BlockSparseIndex, tuning
from kernels.attention_launch import AttentionProblem, forward
from kernels.layouts import LayoutSpec

HEAD_DIM, HEADS, TOKENS, BLOCK = 128, 16, 65536, 128
VARIANTS = {"64x64": (64, 64, 4, 3), "128x128": (128, 128, 8, 3), "128x64": (128, 64, 8, 3)}
# (N, factors or None for all, global blocks, causal, dropout)
CASES = [(n, k, 0, False, 0.0) for n in (4096, 16384, 65536) for k in (2, 4, None)] + [
    (16384, None, 1, True, 0.1), (65536, None, 1, True, 0.1), (16384, 2, 1, False, 0.0)]


def config(tile):
    block_m, block_n, warps, stages = tile
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages,
            "TMA": tuning.HOST_DESCRIPTORS}


def run_case(n, factors, global_size, causal, dropout_p, rounds):
    batch = TOKENS // n
    torch.manual_seed(0)
    q, k, v = [torch.randn(batch, n, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
               for _ in range(3)]
    layout = LayoutSpec(block_size=BLOCK, n_factors=factors, global_size=global_size).build(n)
    index = BlockSparseIndex.from_layout(layout, BLOCK, n, n, causal, q.device)
    seed = torch.tensor([1234], device="cuda", dtype=torch.int64)
    prob = AttentionProblem(q, k, sm_scale=HEAD_DIM ** -0.5, causal=causal, dropout_p=dropout_p,
                            seed=seed, sparse=index)
    calls = {name: (lambda c=config(tile): forward(q, k, v, prob, c)[0])
             for name, tile in VARIANTS.items()}
    outputs = {name: call() for name, call in calls.items()}
    times = {name: [] for name in calls}
    for _ in range(rounds):  # alternated, so that clock drift touches every variant alike
        for name, call in calls.items():
            times[name].append(triton.testing.do_bench(call, warmup=25, rep=100,
                                                       return_mode="median"))
    base = statistics.median(times["64x64"])
    rows = []
    for name in calls:
        ms = statistics.median(times[name])
        rows.append(dict(seqlen=n, n_factors=factors, global_size=global_size, causal=causal,
                         dropout_p=dropout_p, density=index.density, variant=name, tile=VARIANTS[name],
                         ms=ms, all_ms=times[name], speedup_vs_table=base / ms,
                         max_abs_diff=(outputs[name].float() - outputs["64x64"].float())
                         .abs().max().item()))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in CASES:
        rows += run_case(*case, args.rounds)
        (out / "ab_fwd_d128.json").write_text(json.dumps(dict(
            device=torch.cuda.get_device_name(), head_dim=HEAD_DIM, heads=HEADS, tokens=TOKENS,
            rounds=args.rounds, rows=rows), indent=1))
    print("| N | k | global | causal | dropout | density | variant | ms | vs 64x64 | max diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seqlen']} | {r['n_factors'] or 'all'} | {r['global_size']} | {int(r['causal'])} "
              f"| {r['dropout_p']} | {r['density']:.4f} | {r['variant']} | {r['ms']:.3f} "
              f"| {r['speedup_vs_table']:.3f} | {r['max_abs_diff']:.2e} |")


if __name__ == "__main__":
    main()
