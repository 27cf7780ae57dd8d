"""Does a longer window learn slower at equal tokens with PyTorch's own attention too?

Table 4 at the gpu scale (GPT-2 small, our flash kernel, 131M tokens) ranks 4K below 2K below 1K,
and its 4K-draws runs show the longer window behind even at the first positions of the window,
where both models see the same context. This asks whether that needs our kernel: the default job's
small GPT (4 layers, d_model 128, the offline Python-docs corpus, BPE 8192) trained on the CPU with
PyTorch's attention (attention=sdpa) at window 128 and at window 512, on the same draws of 512
tokens (window 128 cuts each into 4 consecutive windows: data.windows_per_draw) and the same 2,048
tokens per step, same seed. Both final models are then scored on the same tokens with the same
context: the validation split cut into windows of 128, loss by position.

Rule, fixed before the runs: if the window-512 model's loss on those windows is above the
window-128 model's by more than 0.05 nats, the longer window learned slower at equal tokens with
PyTorch's attention as well (the lag is not our kernel's); otherwise it does not show at this scale.

Then why (asked after those two runs): window512-local128 is window 512 whose queries see only the
last 128 tokens (attention=local, window_left 127): the window's positions and draws, window 128's
reach. Rule, fixed before it ran: if its score lies nearer window 128's, attending further back
explains most of the lag; if nearer window 512's, the window's length itself does.

And which part of the length (asked after window512-local128 landed nearer window 512): a learned
position table gives each position one token per sequence, so at equal tokens per step a window
4x longer trains each position's vector on 4x fewer examples. window128-nope and window512-nope
are the two windows without position embeddings (model.pos_emb=none: causal attention alone tells
order). Rule, fixed before they ran: if window512-nope trails window128-nope by less than half the
learned-position gap (window512 minus window128), the learned table explains most of the lag.

Writes OUT/equal_tokens.json and OUT/equal_tokens.png, prints a table. Usage, from the repository
root (about 40 minutes on 2 CPU cores for the five runs):
    python research/context_lag/equal_tokens_cpu.py reports/bench/context_lag

Run 2026-11-29 on 2 CPU cores (torch 2.13, 800 steps, 1.6M tokens, 7-8 minutes a run), scored on
the same 128-token windows: window128 5.095, window512 5.549 (0.45 nats behind, behind at every
position bucket: 0.63 at position 0, where neither model has context, 0.44 at positions 64-127;
its curve trailed from the first check and the gap widened to the end): the longer window learned
slower with PyTorch's attention too, so the lag is not our kernel's. window512-local128 5.594,
nearer window 512: seeing less does not help, the window's length itself is the cause.
window128-nope 5.135, window512-nope 5.255: without position embeddings the gap falls from 0.45
to 0.12 nats, under half: the learned position table, each of whose rows sees one token per
sequence, explains most of the lag at this scale; GPT-2 small at 4K on the GPU does not bear it
out (RESULTS.md, Table 4: without positions 4K trails 1K further).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from fa_train.models.loading import load_init_weights
from fa_train.train import CONFIG_DIR, train

DRAW = 512                 # tokens per random draw, for both windows
STEP_TOKENS = 2048         # tokens per optimizer step
SCORE_WINDOW = 128         # both models are scored on windows of this length
MARGIN = 0.05              # nats: the rule above
RUNS = {"window128": (128, ["attention=sdpa"]), "window512": (512, ["attention=sdpa"]),
        "window512-local128": (512, ["attention=local", "attention.window_left=127",
                                     "attention.window_right=0"]),
        "window128-nope": (128, ["attention=sdpa", "model.pos_emb=none"]),
        "window512-nope": (512, ["attention=sdpa", "model.pos_emb=none"])}


def run_config(out: Path, name: str, steps: int, val_every: int):
    window, attention = RUNS[name]
    overrides = ["experiment=default", *attention, f"data.seq_len={window}",
                 f"data.batch_size={STEP_TOKENS // window}", f"data.windows_per_draw={DRAW // window}",
                 f"trainer.max_steps={steps}", f"trainer.val_check_interval={val_every}",
                 "trainer.limit_val_batches=1.0", "trainer.check_val_every_n_epoch=null",
                 f"callbacks.checkpoint.every_n_train_steps={steps}", "callbacks.progress=null",
                 f"paths.output_dir={out / name}", f"paths.log_dir={out / 'runs'}",
                 f"task.scheduler.warmup_steps={max(30, steps // 20)}"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


def val_curve(metrics_csv: Path) -> list[tuple[int, float]]:
    with open(metrics_csv) as fh:
        return [(int(float(r["tokens_seen"])), float(r["val/loss"])) for r in csv.DictReader(fh)
                if r.get("val/loss") and r.get("tokens_seen")]


def score(cfg, checkpoint: Path) -> dict:
    """Validation loss of the checkpoint's model on windows of SCORE_WINDOW tokens: overall and by
    position bucket (0, 1, 2-3, 4-7, ...)."""
    data_cfg = cfg.data.copy()
    data_cfg.seq_len = SCORE_WINDOW
    dm = instantiate(data_cfg, _convert_="all")
    dm.setup("validate")
    model = instantiate(cfg.model, vocab_size=dm.vocab_size, _convert_="all")
    load_init_weights(model, checkpoint)
    model.eval()
    n_buckets = int(math.log2(SCORE_WINDOW)) + 1
    sums, counts = torch.zeros(n_buckets, dtype=torch.float64), torch.zeros(n_buckets)
    positions = torch.arange(SCORE_WINDOW)
    bucket = torch.where(positions > 0, torch.log2(positions.clamp(min=1).double()).floor().long() + 1, 0)
    with torch.no_grad():
        for batch in dm.val_dataloader():
            x, y = batch["input_ids"], batch["labels"]
            loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten(),
                                   reduction="none").view_as(y)
            sums.index_add_(0, bucket[: y.shape[1]], loss.sum(0).double())
            counts.index_add_(0, bucket[: y.shape[1]], torch.full((y.shape[1],), float(y.shape[0])))
    edges = [0, 1] + [2 ** b for b in range(1, n_buckets)]
    return {"loss": float(sums.sum() / counts.sum()), "tokens": int(counts.sum()),
            "by_position": {f"{lo}-{hi}": float(s / c) for lo, hi, s, c
                            in zip(edges, edges[1:] + [SCORE_WINDOW], sums, counts)}}


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, run in result["runs"].items():
        xs, ys = zip(*run["val_curve"])
        a.plot([x / 1e6 for x in xs], ys, marker=".", label=name)
        buckets = run["scored"]["by_position"]
        b.plot([int(k.split("-")[1]) for k in buckets], list(buckets.values()), marker="o", label=name)
    a.set(xlabel="tokens seen (M)", ylabel="validation loss at its own window (nats)",
          title="validation loss, same draws and tokens")
    b.set(xscale="log", xlabel="position in a window of 128 (end of bucket)",
          ylabel="validation loss (nats)", title="final models on the same 128-token windows")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--val-every", type=int, default=100)
    ap.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS),
                    help="run these; the others are kept from OUT/equal_tokens.json")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "equal_tokens.json"
    result = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    result.update({"question": __doc__.splitlines()[0], "steps": args.steps,
                   "step_tokens": STEP_TOKENS, "draw_tokens": DRAW, "score_window": SCORE_WINDOW,
                   "margin_nats": MARGIN, "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%d")})
    for name in args.only:
        cfg = run_config(args.out.resolve(), name, args.steps, args.val_every)
        t0 = time.perf_counter()
        m = train(cfg)
        if m["status"] != "ok":
            raise SystemExit(f"{name}: run ended {m['status']}: {m.get('error')}")
        window = RUNS[name][0]
        result["runs"][name] = {
            "seq_len": window, "attention": m["attention"], "overrides": RUNS[name][1],
            "batch_size": STEP_TOKENS // window, "windows_per_draw": DRAW // window,
            "seconds": round(time.perf_counter() - t0, 1), "final_val_loss_own_window": m["val/loss"],
            "val_curve": val_curve(Path(m["metrics_csv"])),
            "scored": score(cfg, Path(m["checkpoint"]))}
    scored = {name: run["scored"]["loss"] for name, run in result["runs"].items()}
    result["gap_nats"] = scored["window512"] - scored["window128"]
    result["verdict"] = ("the longer window learned slower at equal tokens with PyTorch's attention"
                         if result["gap_nats"] > MARGIN else "no lag beyond the margin at this scale")
    if "window512-local128" in scored:
        local = scored["window512-local128"]
        result["local_verdict"] = (
            "nearer window 128's: attending further back explains most of the lag"
            if abs(local - scored["window128"]) < abs(local - scored["window512"]) else
            "nearer window 512's: the window's length itself explains most of the lag")
    if {"window128-nope", "window512-nope"} <= scored.keys():
        result["nope_gap_nats"] = scored["window512-nope"] - scored["window128-nope"]
        result["nope_verdict"] = (
            "the learned position table explains most of the lag"
            if result["nope_gap_nats"] < result["gap_nats"] / 2 else
            "the learned position table does not explain most of the lag")
    path.write_text(json.dumps(result, indent=2))
    plot(result, args.out / "equal_tokens.png")
    print("| run | own-window val loss | on 128-token windows | pos 0 | pos 64-128 | minutes |")
    for name, run in result["runs"].items():
        s = run["scored"]
        print(f"| {name} | {run['final_val_loss_own_window']:.3f} | {s['loss']:.3f} | "
              f"{s['by_position']['0-1']:.3f} | {s['by_position']['64-128']:.3f} | "
              f"{run['seconds'] / 60:.1f} |")
    print(f"gap (512 - 128) on the same windows: {result['gap_nats']:+.3f} nats: {result['verdict']}")
    for key in ("local_verdict", "nope_verdict"):
        if key in result:
            print(f"{key}: {result[key]}")


if __name__ == "__main__":
    main()
