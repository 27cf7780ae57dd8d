"""GPU time of one LAMB step over BERT-large's parameters: multi-tensor (foreach) ops against the
two Triton kernels of kernels/lamb.py, with their largest difference in the updated parameters.

Usage: python research/kernel_probes/lamb_step_bench.py OUT_DIR     (writes OUT_DIR/lamb_step.json)
"""
import datetime
import json
import pathlib
import sys

import torch
from triton.testing import do_bench

from fa_train.models import BertForPreTraining
from fa_train.tasks.optim import build_optimizer
from kernels import lamb


def run(fused, model, grads, steps=3):
    """Parameters after `steps` LAMB steps from the model's state, and the ms of one more."""
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    for p, g in zip(params, grads):
        p.grad = g
    original = lamb.supports
    lamb.supports = original if fused else (lambda *lists: False)
    try:
        opt = build_optimizer(params, "lamb", lr=3.5e-4, betas=(0.9, 0.999), eps=1e-6,
                              weight_decay=0.01)
        for _ in range(steps):
            opt.step()
        after = [p.detach().clone() for p in params]
        ms = do_bench(opt.step, warmup=25, rep=200)
    finally:
        lamb.supports = original
    return after, ms


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = BertForPreTraining(vocab_size=30522, max_seq_len=512, n_layer=24, n_head=16,
                               d_model=1024, d_ff=4096, nsp=False, attention="sdpa").cuda()
    grads = [torch.randn_like(p) * 1e-3 for p in model.parameters()]
    multi, multi_ms = run(False, model, grads)
    fused, fused_ms = run(True, model, grads)
    diff = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
               for a, b in zip(fused, multi))
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "tensors": len(grads), "parameters": sum(g.numel() for g in grads),
              "multi_tensor_ms": multi_ms, "two_kernels_ms": fused_ms,
              "max_relative_difference_after_3_steps": diff}
    (out / "lamb_step.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
