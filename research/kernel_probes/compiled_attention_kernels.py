"""Which kernels a compiled attention block launches, and their GPU time: q, k, v passed as three
views of one projection (flash_attn_func) or as the packed tensor (flash_attn_qkvpacked_func).

Usage (CUDA host): python research/kernel_probes/compiled_attention_kernels.py OUT.json [--batch 16 --seqlen 1024
--heads 12 --head-dim 64]. Writes, for each variant, the Triton kernels Inductor generated, the
launch order of one forward+backward and the GPU ms per step of the top kernels (profiler).
"""
import argparse
import json
import re

import torch
from torch._inductor.utils import run_and_get_code
from torch.profiler import ProfilerActivity, profile

from kernels import flash_attn_func, flash_attn_qkvpacked_func


def census(packed, batch, seqlen, heads, head_dim, steps=10):
    proj = torch.nn.Linear(heads * head_dim, 3 * heads * head_dim, device="cuda",
                           dtype=torch.bfloat16)
    x = torch.randn(batch, seqlen, heads * head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)

    def block(x):
        qkv = proj(x).view(batch, seqlen, 3, heads, head_dim)
        if packed:
            out = flash_attn_qkvpacked_func(qkv, causal=True)
        else:
            out = flash_attn_func(*qkv.unbind(2), causal=True)
        return out.reshape(batch, seqlen, -1)

    torch._dynamo.reset()
    compiled = torch.compile(block)

    def step():
        y = compiled(x)
        y.backward(torch.ones_like(y))

    _, codes = run_and_get_code(step)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    times = {e.key[:60]: round(e.device_time_total / steps / 1000, 4)
             for e in prof.key_averages() if e.device_type.name == "CUDA"}
    return {"inductor_kernels": sorted({n for c in codes for n in re.findall(r"def (triton_\w+)\(", c)}),
            "launches": [n for c in codes for n in re.findall(r"(\w+)\.run\(", c)],
            "gpu_ms_per_step": dict(sorted(times.items(), key=lambda t: -t[1])[:12])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output JSON file")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    shape = (args.batch, args.seqlen, args.heads, args.head_dim)
    result = {"views": census(False, *shape), "packed": census(True, *shape)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v["gpu_ms_per_step"] for k, v in result.items()}, indent=1))


if __name__ == "__main__":
    main()
