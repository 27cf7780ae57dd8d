"""`fa-data pathfinder`: generate images, print a summary table, optionally a montage PNG."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from fa_train.data.lra.pathfinder.dataset import PathfinderImages
from fa_train.data.lra.pathfinder.formats import FORMATS, generate_pathfinder
from fa_train.data.lra.pathfinder.params import DIFFICULTIES, RESOLUTIONS


def write_montage(path: str | os.PathLike, images: Sequence[np.ndarray], labels: Sequence[int],
                  cols: int = 8, title: str | None = None) -> Path:
    """A grid PNG of images with their labels as titles, for checking by eye."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n = len(images)
    cols = max(1, min(cols, n))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2 * cols, 2.2 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k < n:
            ax.imshow(images[k], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
            ax.set_title(f"label {int(labels[k])} ({'same' if labels[k] else 'different'})",
                         fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cli(args) -> int:
    from rich.console import Console
    from rich.table import Table

    summary = generate_pathfinder(args.out, args.resolution, args.difficulty, args.n, args.seed,
                                  args.workers, args.format, args.num_distractors,
                                  progress=not args.no_progress)
    if args.montage:
        src = PathfinderImages(summary["dir"])
        k = min(len(src), args.montage_n)
        write_montage(args.montage, [src[i] for i in range(k)], src.labels[:k],
                      title=f"pathfinder{args.resolution} {args.difficulty} seed {args.seed}")
        summary["montage"] = str(args.montage)
    table = Table(title="fa-data pathfinder")
    table.add_column("key")
    table.add_column("value")
    for key in ("dir", "format", "resolution", "difficulty", "n", "positives", "workers",
                "seconds", "images_per_s", "montage"):
        if key in summary:
            table.add_row(key, str(summary[key]))
    table.add_row("num_distractors", str(summary["params"]["num_distractors"]))
    Console().print(table)
    return 0


def register_cli(subparsers) -> None:
    """Add `fa-data pathfinder ...` to an argparse subparsers object (handler in `func`)."""
    p = subparsers.add_parser("pathfinder", help="generate Pathfinder / Path-X / Path-256 images")
    p.add_argument("--resolution", type=int, default=32, choices=list(RESOLUTIONS))
    p.add_argument("--difficulty", default="hard", choices=list(DIFFICULTIES))
    p.add_argument("--n", type=int, default=1000, help="number of images (>= 1)")
    p.add_argument("--out", required=True, help="output root (pathfinder{R}/... is created in it)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--format", default="npy", choices=list(FORMATS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-distractors", type=int, default=None,
                   help="override K // distractor_length from the spec table (e.g. 17 for the "
                        "Path-X variant)")
    p.add_argument("--montage", default=None, help="write a grid PNG of the first images here")
    p.add_argument("--montage-n", type=int, default=32)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cli)
