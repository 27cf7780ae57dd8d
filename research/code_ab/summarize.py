"""Medians per side (A, B) of the rounds written by run.sh: attention fwd+bwd TFLOP/s by cell and
GPT-2 small tokens/s; writes OUT/ab.json and prints a table (ratio = B / A)."""
import json
import statistics
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    files = list(path.glob("*.json")) if path.is_dir() else []
    return json.loads(files[0].read_text()).get("rows", []) if files else []


def collect(out: Path, side: str) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {}
    for d in sorted(out.glob(f"attn_{side}_*")):
        for r in rows(d):
            if r.get("status") == "ok" and r.get("pass") == "fwd+bwd" and r.get("tflops"):
                key = (f"{r['impl']} d={r.get('head_dim')} N={r.get('seqlen')}"
                       f"{' causal' if r.get('causal') else ''}")
                got.setdefault(key, []).append(float(r["tflops"]))
    for d in sorted(out.glob(f"step_{side}_*")):
        for r in rows(d):
            if r.get("status") == "ok":
                got.setdefault(f"gpt2-small {r['impl']} tokens/s", []).append(float(r["tokens_per_s"]))
    return got


def main(out: str, tree_a: str, tree_b: str) -> None:
    out_dir = Path(out)
    a, b = collect(out_dir, "A"), collect(out_dir, "B")
    table = []
    for key in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        table.append({"cell": key, "A": a[key], "B": b[key], "ratio": mb / ma})
    (out_dir / "ab.json").write_text(json.dumps({"A": tree_a, "B": tree_b, "cells": table}, indent=1))
    print(f"A = {tree_a}, B = {tree_b}; medians")
    print(f"{'cell':40s} {'A':>12s} {'B':>12s} {'B/A':>6s}")
    for row in table:
        print(f"{row['cell']:40s} {statistics.median(row['A']):12.1f} "
              f"{statistics.median(row['B']):12.1f} {row['ratio']:6.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
