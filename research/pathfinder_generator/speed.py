"""Pathfinder generator throughput of one process, this checkout against a baseline revision.

    python research/pathfinder_generator/speed.py [--baseline REV] [--repeats 3] [--resolutions 32 64]

At every resolution, times what `fa-data pathfinder` runs per job (`formats._gen_chunk`: draw,
render, rescale) over images 0..n-1 of stream 0, after a warm-up on another stream that fills the
per-angle tables; the best of `--repeats` runs over the same images (the machine may be shared).
Both sides also hash the images and labels they drew: the run stops if the bytes differ.
The baseline revision is `git archive`d into a temporary folder and timed in its own process, as
is this checkout. Writes `speed.json` and `speed.md` beside this file (or under `--out`); what
follows the notes marker in an existing `speed.md` is kept.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COUNTS = {32: 512, 64: 256, 128: 256, 256: 64}  # 256 at 64/128 px: one whole job of `formats`
BEFORE = "2ea5393"  # the last generator that grew one image at a time
NOTES = "<!-- notes: kept when the table above is rewritten -->"


def measure(resolution: int, n: int, repeats: int) -> dict:
    """Images per CPU-second (and per wall second) of the imported generator, best of `repeats`,
    and a digest of the images and labels drawn."""
    from fa_train.data.lra.pathfinder import formats
    from fa_train.data.lra.pathfinder.params import pathfinder_params

    p = pathfinder_params(resolution)
    formats._gen_chunk((p, 1, 0, 8))
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        _, imgs, labels, _ = formats._gen_chunk((p, 0, 0, n))
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    digest = hashlib.sha256(imgs.tobytes() + labels.tobytes()).hexdigest()[:16]
    return {"images": n, "per_cpu_s": round(n / cpu, 2), "per_wall_s": round(n / wall, 2), "digest": digest}


def _timed(root: Path, resolution: int, n: int, repeats: int) -> dict:
    """`measure` in a fresh process that imports `fa_train` from `root`."""
    code = (f"import sys, json; sys.path.insert(0, {str(root)!r}); sys.path.insert(0, {str(HERE)!r}); "
            f"import speed, fa_train; assert fa_train.__file__.startswith({str(root)!r}); "
            f"print(json.dumps(speed.measure({resolution}, {n}, {repeats})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def render_markdown(res: dict) -> str:
    lines = ["# Pathfinder generator speed", "",
             f"One process, images 0..n-1 of stream 0 at the hard level; images per CPU-second, best of "
             f"{res['repeats']} runs (per wall second in brackets; a shared machine). Baseline: "
             f"`{res['baseline']}` ({res['baseline_commit']}); ours: {res['commit']}. The timed images "
             "are bit-identical between the two (same SHA-256; see also "
             "tests/fa_train/data/test_pathfinder_bytes.py).", "",
             f"    {res['command']}", "",
             "| resolution | images | baseline | ours | speed-up |", "|---|---|---|---|---|"]
    for r, v in res["runs"].items():
        b, o = v["baseline"], v["ours"]
        lines.append(f"| {r} | {o['images']} | {b['per_cpu_s']} ({b['per_wall_s']}) | "
                     f"{o['per_cpu_s']} ({o['per_wall_s']}) | {o['per_cpu_s'] / b['per_cpu_s']:.2f}x |")
    return "\n".join(lines) + "\n"


def _commit(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                          capture_output=True, text=True).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=BEFORE, help="git revision to compare with")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--resolutions", type=int, nargs="+", default=list(COUNTS), choices=list(COUNTS))
    ap.add_argument("--out", default=str(HERE))
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    res = {"baseline": a.baseline, "baseline_commit": _commit(a.baseline), "commit": _commit("HEAD"),
           "repeats": a.repeats, "runs": {},
           "command": "python research/pathfinder_generator/speed.py " + " ".join(argv or sys.argv[1:])}
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.baseline, "fa_train"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for r in a.resolutions:
            run = res["runs"][str(r)] = {"baseline": _timed(Path(tmp), r, COUNTS[r], a.repeats),
                                         "ours": _timed(ROOT, r, COUNTS[r], a.repeats)}
            print(r, run, flush=True)
            if run["baseline"]["digest"] != run["ours"]["digest"]:
                sys.exit(f"{r} px: the images differ from the baseline's")
    out = Path(a.out)
    (out / "speed.json").write_text(json.dumps(res, indent=2) + "\n")
    md = out / "speed.md"
    notes = md.read_text().partition(NOTES)[2] if md.is_file() else ""
    md.write_text(render_markdown(res) + (f"\n{NOTES}{notes}" if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
