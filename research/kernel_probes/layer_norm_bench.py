"""Time of LayerNorm by PyTorch and by kernels/layer_norm.py, forward and forward+backward, over
widths from 8 to 4,096 features at a fixed number of elements (Path-64's step normalizes 256 x
4,097 rows of 32 features, five times), in float32 (as under autocast) and in bf16. Timed by
`triton.testing.do_bench` (CUDA events around queued calls): a call whose host work outlasts its
GPU work measures the host. `--timer profiler` times the same calls by the GPU time the profiler
records for their kernels (the sum over a call's kernels, host time left out), so the two timers
side by side say where the host is what they measure.

Usage: python research/kernel_probes/layer_norm_bench.py OUT_DIR [--elements 33554432]
       [--widths 8,16,32,...] [--rounds 3] [--timer do_bench|profiler]
Writes OUT_DIR/layer_norm.json and prints a table last.
"""
import argparse
import datetime
import json
import pathlib
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernels.layer_norm import layer_norm

WIDTHS = "8,16,32,64,128,256,512,768,1024,2048,4096"


def gpu_ms(call, calls=20):
    """Mean GPU time of one call: the kernels' durations the profiler records, summed."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == cuda) / calls / 1e3


def timed(fn, x, weight, bias, dy, backward, timer="do_bench"):
    def call():
        y = fn(x, (x.shape[-1],), weight, bias)
        if backward:
            torch.autograd.grad(y, (x, weight, bias), dy)
    if timer == "profiler":
        return gpu_ms(call)
    return do_bench(call, warmup=25, rep=100, return_mode="median")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--elements", type=int, default=1 << 25)
    ap.add_argument("--widths", default=WIDTHS)
    ap.add_argument("--rounds", type=int, default=3, help="each case timed this many times in turn")
    ap.add_argument("--timer", choices=("do_bench", "profiler"), default="do_bench")
    args = ap.parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    impls = {"torch": F.layer_norm, "fused": layer_norm}
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for width in map(int, args.widths.split(",")):
            torch.manual_seed(width)
            n_rows = args.elements // width
            x = torch.randn(n_rows, width, device="cuda", dtype=dtype, requires_grad=True)
            weight = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            bias = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn(n_rows, width, device="cuda", dtype=dtype)
            cases = [(impl, backward) for backward in (False, True) for impl in impls]
            times = {case: [] for case in cases}
            for _ in range(args.rounds):
                for impl, backward in cases:
                    times[impl, backward].append(timed(impls[impl], x, weight, bias, dy, backward,
                                                      args.timer))
            for impl, backward in cases:
                ms = statistics.median(times[impl, backward])
                moved = (2 + 3 * backward) * x.numel() * x.element_size()  # x, y; x, dy, dx
                rows.append(dict(dtype=str(dtype).removeprefix("torch."), width=width,
                                 rows=n_rows, impl=impl, pass_="fwd+bwd" if backward else "fwd",
                                 ms=ms, all_ms=times[impl, backward], gb_per_s=moved / ms / 1e6))
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "elements": args.elements, "rounds": args.rounds, "timer": args.timer, "rows": rows}
    name = "layer_norm.json" if args.timer == "do_bench" else f"layer_norm_{args.timer}.json"
    (out / name).write_text(json.dumps(result, indent=1))
    print(f"\n{result['gpu']}, torch {result['torch']}; {args.elements} elements per call, "
          f"timed by {args.timer}")
    print(f"{'dtype':9} {'width':>6} {'pass':8} {'torch ms':>9} {'fused ms':>9} {'speed-up':>8} "
          f"{'fused GB/s':>10}")
    by = {(r["dtype"], r["width"], r["pass_"], r["impl"]): r for r in rows}
    for (dtype, width, pass_, impl), r in by.items():
        if impl == "fused":
            base = by[dtype, width, pass_, "torch"]["ms"]
            print(f"{dtype:9} {width:6} {pass_:8} {base:9.3f} {r['ms']:9.3f} "
                  f"{base / r['ms']:8.2f} {r['gb_per_s']:10.0f}")


if __name__ == "__main__":
    main()
