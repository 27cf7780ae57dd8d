"""Probe: forward with K/V loaded through TMA tensor descriptors vs pointer loads, alternated in
one process (outputs compared). Usage: python scripts/probes/ab_fwd_tma.py OUT_DIR"""
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
variant = {}
_orig = fa._launch


def _patched(kernel, grid, args, config, **flags):
    if kernel is fa._fwd_kernel and variant:
        flags = dict(flags, TMA=variant["tma"])
        config = dict(config, num_stages=variant.get("stages", config["num_stages"]))
    return _orig(kernel, grid, args, config, **flags)


fa._launch = _patched
VARIANTS = {"ptr": {}, "tma3": {"tma": True}, "tma2": {"tma": True, "stages": 2}}
rows = []
for d, h in ((64, 32), (128, 16)):
    for n in (1024, 4096, 16384):
        for causal in (False, True):
            b = 16384 // n
            g = torch.Generator(device=dev).manual_seed(0)
            q, k, v = (torch.randn(b, n, h, d, dtype=torch.bfloat16, device=dev, generator=g)
                       for _ in range(3))
            prob = fa._problem(q, k, None, None, None, None, None, 0, 0, 0, causal, d ** -0.5, 0.0)
            fns, outs = {}, {}
            for name, var in VARIANTS.items():
                variant.clear(); variant.update(var)
                outs[name] = fa._forward(q, k, v, prob)
                fns[name] = (lambda var=var: (variant.clear(), variant.update(var),
                                              fa._forward(q, k, v, prob)))
            ref_o, ref_l = outs["ptr"]
            diff = {name: max((o.float() - ref_o.float()).abs().max().item(),
                              (l - ref_l).abs().max().item()) for name, (o, l) in outs.items()}
            times = {name: [] for name in fns}
            for _ in range(3):
                for name, fn in fns.items():
                    times[name].append(do_bench(fn, warmup=25, rep=100))
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            for name in fns:
                rows.append(dict(d=d, n=n, causal=causal, variant=name, ms=med[name],
                                 all_ms=times[name], tflops=flops / med[name] / 1e9,
                                 max_abs_diff_vs_ptr=diff[name]))
            print(f"d={d} N={n} causal={int(causal)}: " + "  ".join(
                f"{name} {flops / med[name] / 1e9:.0f}" for name in fns) +
                f"  diffs {diff['tma3']:.1e} {diff['tma2']:.1e}", flush=True)
json.dump(rows, open(f"{out}/ab_fwd_tma.json", "w"), indent=1)
