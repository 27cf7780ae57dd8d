"""Block-sparse times against their memory and matmul floors (kernels/NOTES.md, round 27).

For every block-sparse cell of a `fa-bench blocksparse` result file: the time to read and write
each tensor once (forward: q, k, v, o; both backward passes together: 12 tensors of the same
size, as our dQ and dK/dV passes move) at COPY_TBS, and the time of the matmuls over the listed
blocks (2 in the forward, 3 + 4 in the backward) at MATMUL_TFLOPS. Then the issue's density bound
(1.25 x density x dense time + 0.05 ms) and the share of the memory time that must hide under
the matmuls to meet it. Prints a Markdown table.

Usage: python research/blocksparse/floors.py [RESULT_JSON] [--matmul-tflops 800]
"""
import argparse
import json
import pathlib

COPY_TBS = 3.0  # a device-to-device copy on the H100 (kernels/NOTES.md, header)
BYTES = 2  # bf16
TENSORS = {"fwd": 4, "bwd": 12}
MATMULS = {"fwd": 2, "bwd": 7}


def floors(row, matmul_tflops):
    """(memory ms, matmul ms) of each pass of a block-sparse row."""
    tensor = row["batch"] * row["seqlen"] * row["heads"] * row["head_dim"] * BYTES
    matmul = 2 * row["batch"] * row["heads"] * row["seqlen"] ** 2 * row["head_dim"] * row["density"]
    return {p: (TENSORS[p] * tensor / COPY_TBS / 1e9, MATMULS[p] * matmul / matmul_tflops / 1e9)
            for p in TENSORS}


def index_rows(rows):
    """The measured rows by (impl, head_dim, seqlen, layout, pass)."""
    return {(r["impl"], r["head_dim"], r["seqlen"], r["layout"], r["pass"]): r
            for r in rows if r["status"] == "ok"}


def density_bound_ms(sparse, dense):
    """The issue's density bound on a block-sparse time: 1.25 x density x dense time + 0.05 ms."""
    return 1.25 * sparse["density"] * dense["ms"] + 0.05


def table(rows, matmul_tflops):
    index = index_rows(rows)
    lines = [f"Floors: memory at {COPY_TBS} TB/s, matmuls at {matmul_tflops} TFLOP/s; times in ms.", "",
             "| d | N | layout | density | fwd | fwd floors (mem + matmul) | bwd | bwd floors "
             "| fwd+bwd | floors in series | overlapped | bound | memory to hide |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (impl, d, n, layout, p), fwd in sorted(index.items()):
        both = index.get((impl, d, n, layout, "fwd+bwd"))
        dense = index.get(("flash", d, n, "dense", "fwd+bwd"))
        if impl != "blocksparse" or p != "fwd" or not (both and dense):
            continue
        f = floors(fwd, matmul_tflops)
        memory = f["fwd"][0] + f["bwd"][0]
        series = memory + f["fwd"][1] + f["bwd"][1]
        overlapped = max(f["fwd"]) + max(f["bwd"])
        bound = density_bound_ms(fwd, dense)
        hide = max(series - bound, 0.0) / memory
        lines.append(
            f"| {d} | {n} | {layout} | {fwd['density']:.4f} | {fwd['ms']:.3f} | "
            f"{f['fwd'][0]:.3f} + {f['fwd'][1]:.3f} | {both['ms'] - fwd['ms']:.3f} | "
            f"{f['bwd'][0]:.3f} + {f['bwd'][1]:.3f} | {both['ms']:.3f} | {series:.3f} | "
            f"{overlapped:.3f} | {bound:.3f} | {hide:.2f} |")
    return lines


def main():
    results = pathlib.Path(__file__).resolve().parents[2] / "reports" / "bench" / "blocksparse"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", nargs="?", default=results / "blocksparse.json")
    ap.add_argument("--matmul-tflops", type=float, default=800.0)
    args = ap.parse_args()
    data = json.loads(pathlib.Path(args.result).read_text())
    print("\n".join(table(data["rows"], args.matmul_tflops)))


if __name__ == "__main__":
    main()
