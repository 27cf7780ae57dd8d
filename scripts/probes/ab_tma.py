"""Probe: each attention kernel with its streamed tiles (K/V, or Q/dO) loaded through TMA tensor
descriptors vs pointer loads, alternated in one process; results compared bitwise.
Usage: python scripts/probes/ab_tma.py OUT_DIR"""
import json
import statistics
import sys

import torch
import triton
from triton.testing import do_bench

import kernels.flash_attn as fa

out = sys.argv[1]
dev = torch.device("cuda")
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
KERNELS = {fa._fwd_kernel: "fwd", fa._bwd_dq_kernel: "dq", fa._bwd_dkdv_kernel: "dkdv"}
use_tma = set()
_orig = fa._launch


def _patched(kernel, grid, args, config, **flags):
    return _orig(kernel, grid, args, config, **dict(flags, TMA=KERNELS[kernel] in use_tma))


fa._launch = _patched


def run(fn, tma):
    use_tma.clear()
    use_tma.update(tma)
    return fn()


def case(b, n, h, d, causal, dropout_p):
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v, do = (torch.randn(b, n, h, d, dtype=torch.bfloat16, device=dev, generator=g)
                   for _ in range(4))
    seed = torch.tensor([1234], dtype=torch.int64, device=dev) if dropout_p else None
    prob = fa._problem(q, k, seed, None, None, None, None, 0, 0, 0, causal, d ** -0.5, dropout_p)
    o, lse = fa._forward(q, k, v, prob)
    fwd = lambda: fa._forward(q, k, v, prob)
    bwd_det = lambda: fa._backward(do, q, k, v, o, lse, prob, deterministic=True)
    bwd_atomic = lambda: fa._backward(do, q, k, v, o, lse, prob, deterministic=False)
    fns = {("fwd", "ptr"): (fwd, ()), ("fwd", "tma"): (fwd, ("fwd",)),
           ("bwd", "ptr"): (bwd_det, ()), ("bwd", "tma_dq"): (bwd_det, ("dq",)),
           ("bwd", "tma_dkdv"): (bwd_det, ("dkdv",)), ("bwd", "tma_both"): (bwd_det, ("dq", "dkdv"))}
    if dropout_p:
        fns.update({("bwd_atomic", "ptr"): (bwd_atomic, ()),
                    ("bwd_atomic", "tma_dkdv"): (bwd_atomic, ("dkdv",))})
    ref = {}
    same = {}
    for (part, name), (fn, tma) in fns.items():
        res = run(fn, tma)
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        if name == "ptr":
            ref[part] = res
        else:
            same[(part, name)] = all(torch.equal(x, y) for x, y in zip(res, ref[part]))
    times = {key: [] for key in fns}
    for _ in range(3):
        for key, (fn, tma) in fns.items():
            times[key].append(do_bench(lambda: run(fn, tma), warmup=25, rep=100))
    med = {key: statistics.median(ts) for key, ts in times.items()}
    rows = []
    for (part, name), ts in times.items():
        rows.append(dict(shape=[b, n, h, d], causal=causal, dropout_p=dropout_p, part=part,
                         variant=name, ms=med[(part, name)], all_ms=ts,
                         speedup_vs_ptr=med[(part, "ptr")] / med[(part, name)],
                         bitwise_equal_ptr=same.get((part, name), True)))
    print(f"B={b} N={n} H={h} d={d} causal={int(causal)} p={dropout_p}: " + "  ".join(
        f"{r['part']}/{r['variant']} x{r['speedup_vs_ptr']:.3f}{'' if r['bitwise_equal_ptr'] else '!'}"
        for r in rows if r["variant"] != "ptr"), flush=True)
    return rows


rows = []
for d, h in ((64, 32), (128, 16)):
    for n in (1024, 4096, 16384):
        for causal in (False, True):
            rows += case(16384 // n, n, h, d, causal, 0.0)
for b, n in ((16, 1024), (4, 4096), (1, 16384)):
    rows += case(b, n, 12, 64, True, 0.1)
json.dump(rows, open(f"{out}/ab_tma.json", "w"), indent=1)
