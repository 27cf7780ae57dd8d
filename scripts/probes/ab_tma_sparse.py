"""Probe: block-sparse calls (butterfly layouts) with each kernel's streamed tiles loaded through
TMA descriptors vs pointer loads, alternated in one process; results compared bitwise.
Usage: python scripts/probes/ab_tma_sparse.py OUT_DIR"""
import json
import statistics
import sys

import torch
from triton.testing import do_bench

import kernels.flash_attn as fa
from kernels import blocksparse_attn_func
from kernels.layouts import butterfly_layout

out = sys.argv[1]
dev = torch.device("cuda")
KERNELS = {fa._fwd_kernel: "fwd", fa._bwd_dq_kernel: "dq", fa._bwd_dkdv_kernel: "dkdv"}
use_tma = set()
_orig = fa._launch


def _patched(kernel, grid, args, config, **flags):
    return _orig(kernel, grid, args, dict(config, TMA=KERNELS[kernel] in use_tma), **flags)


fa._launch = _patched
VARIANTS = {"ptr": (), "tma_fwd": ("fwd",), "tma_dq": ("dq",), "tma_dkdv": ("dkdv",),
            "tma_all": ("fwd", "dq", "dkdv")}
rows = []
for d, h in ((64, 16), (128, 8)):
    for n in (4096, 16384):
        for factors in (2, 4):
            b = 65536 // n
            g = torch.Generator(device=dev).manual_seed(0)
            q, k, v, do = (torch.randn(b, n, h, d, dtype=torch.bfloat16, device=dev,
                                       generator=g).requires_grad_() for _ in range(4))
            layout = butterfly_layout(n, 128, n_factors=factors).to(dev)

            def step():
                o = blocksparse_attn_func(q, k, v, layout, block_size=128, deterministic=True)
                return [o, *torch.autograd.grad(o, (q, k, v), do)]

            def fwd():
                with torch.no_grad():
                    return [blocksparse_attn_func(q, k, v, layout, block_size=128)]

            res, times = {}, {}
            for name, tma in VARIANTS.items():
                use_tma.clear(); use_tma.update(tma)
                res[name] = step()
            for _ in range(3):
                for name, tma in VARIANTS.items():
                    use_tma.clear(); use_tma.update(tma)
                    times.setdefault((name, "fwd"), []).append(do_bench(fwd, warmup=25, rep=100))
                    times.setdefault((name, "fwd+bwd"), []).append(do_bench(step, warmup=25, rep=100))
            med = {key: statistics.median(ts) for key, ts in times.items()}
            line = []
            for (name, part), ts in times.items():
                same = all(torch.equal(x, y) for x, y in zip(res[name], res["ptr"]))
                rows.append(dict(shape=[b, n, h, d], factors=factors, variant=name, part=part,
                                 ms=med[(name, part)], all_ms=ts, bitwise_equal_ptr=same,
                                 speedup_vs_ptr=med[("ptr", part)] / med[(name, part)]))
                if name != "ptr":
                    line.append(f"{name}/{part} x{rows[-1]['speedup_vs_ptr']:.3f}{'' if same else '!'}")
            print(f"d={d} N={n} k={factors}: " + "  ".join(line), flush=True)
json.dump(rows, open(f"{out}/ab_tma_sparse.json", "w"), indent=1)
