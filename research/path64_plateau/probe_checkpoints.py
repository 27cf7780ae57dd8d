"""Why does the Path-64 classifier sit at chance after self-pretraining? Look inside its checkpoints.

For each of: a freshly initialized model, the self-pretrained weights (as fine-tuning starts from
them) and the fine-tuned run's checkpoints, on freshly generated Path-64 images (a stream the runs
never saw), with the run's block-sparse layout computed densely in float32 on the CPU:
- the classifier's accuracy and how much its logits vary from image to image;
- the pooled feature and the head's hidden ReLU units: how many units are ever active;
- a linear probe (logistic regression) on the pooled feature, trained on half the images;
- the gradient norm of the classification loss per parameter group, at those weights;
- for the self-pretrained weights: masked-pixel accuracy on black and on non-black pixels.
Writes OUT/probe.json and prints a table. Usage, from the repository root:
    python research/path64_plateau/probe_checkpoints.py reports/bench/path64_plateau --images 256
        [--tuned path64-blocksparse] [--spt path64-blocksparse-spt]

Run 2026-11-29 on the CPU (torch 2.13, about 10 minutes) over the checkpoints of
reports/table6_pathx/gpu/path64-blocksparse{,-spt} (NVIDIA H200, 2026-11-29, lr 1e-3, paused at
step 10,038 at 50% validation accuracy). Found: the self-pretrained weights give the head inputs
that differ from image to image, and each of its 32 ReLU units fires on some images; in both
fine-tuned checkpoints (best validation and last) no unit fires on any image: the logits are the
same for every image (spread 0) and the gradient below the head is exactly 0. The head died in the
first epoch, which no later step can undo. Masked pixels: 90.2% right, 74.2% of them black (98.1%
right on black, 67.5% on the others): the pretraining learned more than the background.

Run 2026-12-02 on the CPU over path64-blocksparse-aug (lr 1e-4, training images under the square's
symmetries, stalled at step 7,550; `reports/bench/path64_plateau/aug/`): its best-validation
weights (step 624) still had 26 of 32 head units firing and features that vary from image to
image (spread 1.71); at the stall no unit fires, and the pooled feature has collapsed to nearly
the same vector for every image (spread 0.067, from 2.79 at its start; linear probe 48%): the
encoder stopped telling images apart before the head died.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

from fa_train.data.lra import pathfinder as pf
from fa_train.models import LRAClassifier
from fa_train.models.loading import load_init_weights

RUNS = Path("reports/table6_pathx/gpu")


def dense_layout_attention(attention):
    """Replace `attention`'s Triton forward by the same layout computed densely (float32)."""
    spec, keeps = attention.config, {}

    def forward(q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        n, b = q.shape[1], spec.block_size
        if n not in keeps:
            blocks = spec.build(n, causal)
            keeps[n] = blocks.repeat_interleave(b, 0).repeat_interleave(b, 1)[:n, :n]
        out = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)),
                                             attn_mask=keeps[n], scale=softmax_scale)
        return out.transpose(1, 2).to(q.dtype)

    attention.forward = forward


def build_model(run: str, seed: int) -> LRAClassifier:
    cfg = yaml.safe_load((RUNS / run / "config.yaml").read_text())["model"]
    cfg.pop("_target_")
    torch.manual_seed(seed)
    model = LRAClassifier(**cfg)
    dense_layout_attention(model.attention)
    return model.eval()


def images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    params = pf.pathfinder_params(64, "hard", None)
    drawn = pf.generate_images(params, seed, range(n))
    x = torch.from_numpy(np.stack([im.reshape(-1) for im, _ in drawn]).astype(np.int64))
    return x, torch.tensor([label for _, label in drawn])


def head_parts(model, x, batch):
    """Pooled features, head hidden pre-activations and logits, without gradients."""
    feats, pre, logits = [], [], []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            f = model.encode(x[i:i + batch])
            h = model.head[0](f)
            feats.append(f), pre.append(h), logits.append(model.head[2](F.relu(h)))
    return torch.cat(feats), torch.cat(pre), torch.cat(logits)


def linear_probe(feats, y, steps=500) -> float:
    """Held-out accuracy of logistic regression (standardized features, L2 1e-3): first half
    trains, second half tests."""
    n = len(y) // 2
    mu, sd = feats[:n].mean(0), feats[:n].std(0).clamp(min=1e-6)
    z = (feats - mu) / sd
    w = torch.zeros(z.shape[1], requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps)

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(z[:n] @ w + b, y[:n].float()) + 1e-3 * w.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return ((z[n:] @ w + b > 0).long() == y[n:]).float().mean().item()


def grad_norms(model, x, y, batch) -> dict[str, float]:
    """Norm of d(cross-entropy)/d(parameters) on (x, y), grouped: embeddings, each layer, head."""
    model.zero_grad()
    for i in range(0, len(x), batch):
        loss = F.cross_entropy(model(x[i:i + batch]), y[i:i + batch], reduction="sum") / len(x)
        loss.backward()
    groups: dict[str, float] = {}
    for name, p in model.named_parameters():
        key = "head" if name.startswith("head") else (
            ".".join(name.split(".")[:3]) if name.startswith("encoder.layers") else
            "encoder.ln_f" if name.startswith("encoder.ln_f") else "embeddings")
        groups[key] = groups.get(key, 0.0) + (p.grad.square().sum().item() if p.grad is not None else 0.0)
    model.zero_grad()
    return {k: math.sqrt(v) for k, v in groups.items()}


def masked_pixel_accuracy(model, x, batch, mask_prob=0.15, seed=0) -> dict[str, float]:
    """Masked-pixel accuracy of the self-pretrained weights (tied embedding with the mask id),
    split into black (0) and non-black target pixels, beside always answering black."""
    g = torch.Generator().manual_seed(seed)
    hits = {"black": [0, 0], "non-black": [0, 0]}
    mask_id = model.embed.weight.shape[0] - 1
    with torch.no_grad():
        for i in range(0, len(x), batch):
            ids = x[i:i + batch]
            chosen = torch.rand(ids.shape, generator=g) < mask_prob
            h = model.hidden(ids.masked_fill(chosen, mask_id))[0][:, 1:]
            pred = model.token_logits(h[chosen])[:, :mask_id].argmax(-1)
            target = ids[chosen]
            for key, sel in (("black", target == 0), ("non-black", target != 0)):
                hits[key][0] += (pred[sel] == target[sel]).sum().item()
                hits[key][1] += sel.sum().item()
    total = hits["black"][1] + hits["non-black"][1]
    return {"acc": (hits["black"][0] + hits["non-black"][0]) / total,
            "acc_black": hits["black"][0] / hits["black"][1],
            "acc_non_black": hits["non-black"][0] / hits["non-black"][1],
            "black_share": hits["black"][1] / total}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--image-seed", type=int, default=7, help="generator stream (the runs used 0)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tuned", default="path64-blocksparse", help="the fine-tuned run (under RUNS)")
    ap.add_argument("--spt", default="path64-blocksparse-spt", help="the run it started from")
    args = ap.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    t0 = time.time()
    x, y = images(args.images, args.image_seed)
    print(f"{len(x)} images ({y.float().mean():.2f} positive) in {time.time() - t0:.0f} s")
    spt, tuned = RUNS / args.spt, RUNS / args.tuned
    states = {"random init": None,
              "self-pretrained (fine-tuning's start)": spt / "checkpoints" / "last.ckpt",
              "fine-tuned, best validation": tuned / "checkpoints" / "best_weights.pt",
              "fine-tuned, last": tuned / "checkpoints" / "last.ckpt"}
    result = {"images": len(x), "image_seed": args.image_seed, "states": {}}
    for label, path in states.items():
        model = build_model(args.tuned, seed=0)
        if path is not None:
            load_init_weights(model, path)
        feats, pre, logits = head_parts(model, x, args.batch)
        row = {"checkpoint": str(path) if path else None,
               "accuracy": (logits.argmax(-1) == y).float().mean().item(),
               "logit_margin_std": (logits[:, 1] - logits[:, 0]).std().item(),
               "logit_margin_mean": (logits[:, 1] - logits[:, 0]).mean().item(),
               "feature_std_over_images": feats.std(0).mean().item(),
               "head_units_ever_active": int((pre > 0).any(0).sum().item()),
               "head_units": pre.shape[1],
               "linear_probe_accuracy": linear_probe(feats, y),
               "grad_norms": grad_norms(model.train(), x[:64], y[:64], args.batch)}
        if path is not None and "self-pretrained" in label:
            spt_model = build_model(args.spt, seed=0)
            load_init_weights(spt_model, path)
            row["masked_pixels"] = masked_pixel_accuracy(spt_model, x[:64], args.batch)
        result["states"][label] = row
        print(f"{label}: done at {time.time() - t0:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    print("| weights | acc | margin std | feature std | head units active | linear probe | grad head / layer 0 |")
    print("|---|---|---|---|---|---|---|")
    for label, r in result["states"].items():
        g = r["grad_norms"]
        print(f"| {label} | {r['accuracy']:.3f} | {r['logit_margin_std']:.2e} | "
              f"{r['feature_std_over_images']:.2e} | {r['head_units_ever_active']}/{r['head_units']} | "
              f"{r['linear_probe_accuracy']:.3f} | {g['head']:.1e} / {g['encoder.layers.0']:.1e} |")
    if "masked_pixels" in result["states"]["self-pretrained (fine-tuning's start)"]:
        print(json.dumps(result["states"]["self-pretrained (fine-tuning's start)"]["masked_pixels"]))


if __name__ == "__main__":
    main()
