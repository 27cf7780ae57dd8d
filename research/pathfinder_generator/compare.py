"""Does our Pathfinder generator draw what the original draws? Statistics, replay, a small CNN.

    python research/pathfinder_generator/compare.py --reference CHECKOUT [--n 5000] [--jobs 2]

For `n` images of ours (stream `--seed`) and, with `--reference` (a checkout of
drewlinsley/pathfinder, never committed; needs OpenCV), `n` images of the original run by
`reference.py` in `--jobs` subprocesses (image i seeded with i):
- per-image statistics (`fa_train.data.lra.pathfinder.stats`): share of non-zero pixels, mean
  non-zero value, bright blobs, distractors placed, targets touching, target / distractor stroke
  peaks, marker centre, turn angles; pooled histograms; means with standard errors;
- replay: our generator fed the original's own random stream (`LegacyStream`) for the first
  `--replay` indices, counted bit-identical images;
- a small CNN trained on `--n-train` images of each generator and tested on the next `--n-test`
  (and across generators);
- our throughput at every resolution (`--speed`; `speed.py` compares it with an earlier revision).
Writes `results.json` and `results.md` beside this file (or under `--out`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fa_train.data.lra.pathfinder import generator as gen  # noqa: E402
from fa_train.data.lra.pathfinder.params import RESOLUTIONS, pathfinder_params  # noqa: E402
from fa_train.data.lra.pathfinder.stats import SCALARS, measure, snake_turns, summarize  # noqa: E402
from speed import measure as throughput  # noqa: E402  (beside this file)

SPEED_COUNTS = {32: 200, 64: 64, 128: 64, 256: 16}


def ours(p, seed: int, n: int) -> dict[str, np.ndarray]:
    rec: dict[str, list] = {k: [] for k in ("images", "labels", "targets", "distractors", "markers",
                                            "placed", "turns", "turn_counts")}
    for img, label, info in gen.generate_images(p, seed, range(n), return_info=True):
        turns = snake_turns(list(info["targets"]) + list(info["distractors"]))
        rec["images"].append(img)
        rec["labels"].append(label)
        rec["targets"].append(info["layers"]["targets"])
        rec["distractors"].append(info["layers"]["distractors"])
        rec["markers"].append(info["markers"])
        rec["placed"].append(info["num_distractors_placed"])
        rec["turns"] += turns
        rec["turn_counts"].append(len(turns))
    return {k: np.asarray(v) for k, v in rec.items()}


def original(checkout: str, p, n: int, jobs: int) -> dict[str, np.ndarray]:
    """Run reference.py over 0..n-1 in `jobs` subprocesses and merge their records."""
    bounds = np.linspace(0, n, jobs + 1).astype(int)
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            out = os.path.join(tmp, f"ref_{k}.npz")
            cmd = [sys.executable, str(HERE / "reference.py"), "--dir", checkout, "--params",
                   json.dumps(p.to_dict()), "--start", str(a), "--stop", str(b), "--out", out]
            procs.append((subprocess.Popen(cmd), out))
        for proc, _ in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"the original generator failed (exit {proc.returncode})")
        return merge([dict(np.load(out)) for _, out in procs])


def merge(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}


def statistics(rec: dict[str, np.ndarray], p) -> dict:
    rows, offset = [], 0
    for i in range(len(rec["images"])):
        k = int(rec["turn_counts"][i])
        rows.append(measure(rec["images"][i], rec["targets"][i], rec["distractors"][i],
                            rec["markers"][i], int(rec["placed"][i]),
                            rec["turns"][offset:offset + k], p.marker_radius))
        offset += k
    return summarize(rows, rec["images"], rec["turns"], rec["labels"], p.n_distractors)


def replay(rec: dict[str, np.ndarray], p, count: int) -> dict:
    """Our generator on the original's random stream: how many images come out bit-identical."""
    same = 0
    count = min(count, len(rec["images"]))
    for i in range(count):
        sample = gen.draw_sample(p, gen.LegacyStream(np.random.RandomState(i)))
        same += bool(np.array_equal(gen.compose(gen.render_layers(p, sample)), rec["images"][i]))
    return {"images": count, "bit_identical": same}


def speed() -> dict:
    """Images per CPU-second of one process (and per wall second) at every resolution."""
    return {str(r): throughput(r, SPEED_COUNTS[r], repeats=1) for r in RESOLUTIONS}


def cnn_accuracy(train: tuple[np.ndarray, np.ndarray], tests: dict[str, tuple[np.ndarray, np.ndarray]],
                 epochs: int, seed: int) -> dict[str, float]:
    """Train a small CNN on `train` (uint8 images, labels); accuracy on each test set."""
    import torch
    from torch import nn

    torch.set_num_threads(1)  # a model this small only loses to thread synchronisation
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
        nn.Linear(32, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def tensor(x):
        return torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)

    x, y = tensor(train[0]), torch.from_numpy(train[1].astype(np.int64))
    gen_ = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        net.train()
        for idx in torch.randperm(len(x), generator=gen_).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    net.eval()
    out = {}
    with torch.no_grad():
        for name, (tx, ty) in tests.items():
            pred = torch.cat([net(b).argmax(1) for b in tensor(tx).split(500)]).numpy()
            out[name] = float((pred == ty).mean())
    return out


def render_markdown(res: dict) -> str:
    names = [k for k in ("original", "ours") if k in res["statistics"]]
    st = res["statistics"]
    lines = [f"# Pathfinder-{res['resolution']}: our generator vs the original", "",
             f"{res['n']} images of each (ours: stream {res['seed']}; the original: image i "
             "seeded with i). Mean ± standard error of per-image values; `diff/se` is the "
             "difference in units of the combined standard error.", "",
             "| statistic | " + " | ".join(names) + (" | diff/se |" if len(names) == 2 else " |"),
             "|---|" + "---|" * len(names) + ("---|" if len(names) == 2 else "")]
    for key in SCALARS:
        cells = [f"{st[n][key]['mean']:.3f} ± {st[n][key]['se']:.3f}" for n in names]
        if len(names) == 2:
            a, b = st["original"][key], st["ours"][key]
            se = math.hypot(a["se"], b["se"])
            cells.append(f"{(b['mean'] - a['mean']) / se:+.2f}" if se > 0 else "n/a")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "Distributions (pooled):", ""]
    for n in names:
        t = st[n]["turn_deg"]
        hist = " / ".join(f"{v:.3f}" for v in st[n]["distractors_placed_hist"])
        lines += [f"- {n}: distractors placed 0, 1, 2, ...: {hist}",
                  f"- {n}: turn degrees median {t['median']:.1f}, p90 {t['p90']:.1f}, max "
                  f"{t['max']:.1f}, {t['distinct']} distinct values",
                  f"- {n}: intensity histogram (16 bins of 16 levels): "
                  + " ".join(f"{v:.3f}" for v in st[n]["intensity_hist_16"])]
    if "replay" in res:
        r = res["replay"]
        lines += ["", f"Replay: our generator fed the original's random stream drew "
                      f"{r['bit_identical']} of {r['images']} images bit-identical to the original's."]
    if "cnn" in res:
        c = res["cnn"]
        lines += ["", f"Small CNN ({c['epochs']} epochs, {c['n_train']} train / {c['n_test']} "
                      "held-out images, same seed and architecture):", "",
                  "| trained on | tested on | accuracy |", "|---|---|---|"]
        for row in c["runs"]:
            lines.append(f"| {row['train']} | {row['test']} | {row['accuracy']:.3f} |")
    if "speed" in res:
        lines += ["", "Our throughput, one process (images per CPU-second; per wall second on a "
                      "shared machine):", "", "| resolution | images/CPU-s | images/wall-s |", "|---|---|---|"]
        for r, v in res["speed"].items():
            lines.append(f"| {r} | {v['per_cpu_s']} | {v['per_wall_s']} |")
    lines += ["", "Speed against the one-image-at-a-time generator, profile and floor: "
                  "[speed.md](speed.md) (tables written by `speed.py`)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=None, help="checkout of the original generator")
    ap.add_argument("--reference-npz", nargs="*", default=None,
                    help="records reference.py already wrote (instead of running it again)")
    ap.add_argument("--ours-npz", default=None,
                    help="our records: read from this file if it exists, else written to it")
    ap.add_argument("--resolution", type=int, default=32, choices=list(RESOLUTIONS))
    ap.add_argument("--n", type=int, default=5000, help="images of each generator")
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--replay", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--no-cnn", action="store_true")
    ap.add_argument("--out", default=str(HERE))
    a = ap.parse_args(argv)
    for name in ("n", "n_train", "jobs", "epochs"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.n_train >= a.n:
        ap.error(f"--n-train must be below --n ({a.n})")
    p = pathfinder_params(a.resolution)
    cached = Path(a.ours_npz) if a.ours_npz else None
    if cached is not None and cached.is_file():
        recs = {"ours": dict(np.load(cached))}
    else:
        recs = {"ours": ours(p, a.seed, a.n)}
        if cached is not None:
            np.savez_compressed(cached, **recs["ours"])
    if a.reference_npz:
        recs["original"] = merge([dict(np.load(f)) for f in a.reference_npz])
    elif a.reference:
        recs["original"] = original(a.reference, p, a.n, a.jobs)
    for name, rec in recs.items():
        if len(rec["images"]) < a.n:
            raise SystemExit(f"{name}: {len(rec['images'])} images, fewer than --n {a.n}")
        kept = {k: v[:a.n] for k, v in rec.items()}
        kept["turns"] = rec["turns"][:int(rec["turn_counts"][:a.n].sum())]
        recs[name] = kept
    res = {"resolution": a.resolution, "n": a.n, "seed": a.seed, "params": p.to_dict(),
           "statistics": {name: statistics(rec, p) for name, rec in recs.items()}}
    if "original" in recs:
        res["replay"] = replay(recs["original"], p, a.replay)
    if not a.no_cnn:
        split = {k: ((r["images"][:a.n_train], r["labels"][:a.n_train]),
                     (r["images"][a.n_train:], r["labels"][a.n_train:])) for k, r in recs.items()}
        runs = []
        for train_name, (train, _) in split.items():
            acc = cnn_accuracy(train, {k: v[1] for k, v in split.items()}, a.epochs, a.seed)
            runs += [{"train": train_name, "test": k, "accuracy": v} for k, v in acc.items()]
        res["cnn"] = {"epochs": a.epochs, "n_train": a.n_train, "n_test": a.n - a.n_train, "runs": runs}
    if a.speed:
        res["speed"] = speed()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "results.md").write_text(render_markdown(res))
    print(render_markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
