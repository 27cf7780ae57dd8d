"""Host (CPU) time per attention call, layer by layer of the call path, on a GPU.

A tiny problem (batch 1, 1 head, N 64, d 64) keeps the GPU idle, so the wall time of many
back-to-back calls is the CPU time of one call. Compares torch SDPA with each layer of ours:
public function, custom op, launcher, bare Triton launches; eager and compiled.

Usage: python research/kernel_probes/attention_host_overhead.py OUT_DIR
Writes OUT_DIR/host_overhead.json and OUT_DIR/host_overhead.md (microseconds per call);
`--render OUT_DIR` rewrites the Markdown from an existing JSON.
"""
import datetime
import json
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

from kernels import attention_launch, attention_op
from kernels import flash_attn as fa


def per_call_us(fn, calls=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def render(out_dir):
    """OUT_DIR/host_overhead.md from OUT_DIR/host_overhead.json."""
    info = json.loads((out_dir / "host_overhead.json").read_text())
    lines = ["# Host time per attention call", "",
             f"{info['gpu']}, {info.get('date', 'date not recorded in the file')}, "
             f"torch {info['torch']}; batch 1, 1 head, N 64, d 64, bf16 (the GPU stays idle, so "
             "wall time per call is host time). Rows: `host_overhead.json`.", "",
             "| call | µs per call |", "|---|---|"]
    lines += [f"| {r['case']} | {r['us_per_call']:.1f} |" for r in info["rows"]]
    (out_dir / "host_overhead.md").write_text("\n".join(lines) + "\n")


def main():
    if sys.argv[1] == "--render":
        return render(pathlib.Path(sys.argv[2]))
    out_dir = pathlib.Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    shape = (1, 64, 1, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    qh, kh, vh = (t.detach().transpose(1, 2) for t in (q, k, v))
    scale = 64 ** -0.5
    seed = torch.zeros(1, dtype=torch.int64, device="cuda")  # the kernels read it on the device
    prob = attention_launch.AttentionProblem(q, k, sm_scale=scale, causal=True, seed=seed)
    o, lse = attention_launch.forward(q.detach(), k.detach(), v.detach(), prob)
    op_inputs = attention_op.OpInputs(q.detach(), k.detach(), v.detach(), seed=seed, kpm=None,
                                      cu_q=None, cu_k=None, sparse=[], max_q=0, max_k=0, block=0,
                                      causal=True, sm_scale=scale, dropout_p=0.0,
                                      deterministic=False)

    def fwd_bwd(attn):
        def run():
            torch.autograd.backward(attn(q, k, v), do)
        return run

    def flash(x, y, z):
        return fa.flash_attn_func(x, y, z, causal=True)

    def sdpa(x, y, z):
        return F.scaled_dot_product_attention(x.transpose(1, 2), y.transpose(1, 2),
                                              z.transpose(1, 2), is_causal=True).transpose(1, 2)

    cases = {
        "sdpa forward (no grad)": lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=True),
        "flash_attn_func forward (no grad)": lambda: fa.flash_attn_func(
            q.detach(), k.detach(), v.detach(), causal=True),
        "custom op forward": lambda: attention_op.forward_op(*op_inputs),
        "forward (launcher, 1 kernel)": lambda: attention_launch.forward(
            q.detach(), k.detach(), v.detach(), prob),
        "custom op backward": lambda: attention_op.backward_op(do, o, lse, *op_inputs),
        "backward (launcher, 3 kernels)": lambda: attention_launch.backward(
            do, q.detach(), k.detach(), v.detach(), o, lse, prob),
        "sdpa fwd+bwd (eager autograd)": fwd_bwd(sdpa),
        "flash fwd+bwd (eager autograd)": fwd_bwd(flash),
        "sdpa fwd+bwd (compiled)": fwd_bwd(torch.compile(sdpa)),
        "flash fwd+bwd (compiled)": fwd_bwd(torch.compile(flash)),
    }
    rows = []
    for name, fn in cases.items():
        rows.append({"case": name, "us_per_call": per_call_us(fn)})
        print(f"{rows[-1]['us_per_call']:9.1f} us  {name}", flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rows": rows}
    (out_dir / "host_overhead.json").write_text(json.dumps(info, indent=2) + "\n")
    render(out_dir)


if __name__ == "__main__":
    main()
