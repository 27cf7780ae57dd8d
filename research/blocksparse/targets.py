"""The block-sparse issue's three targets, cell by cell, from a `fa-bench blocksparse` result file.

For each block-sparse cell and pass: the time against the density bound (1.25 x density x our
dense time + 0.05 ms, forward+backward only); effective TFLOP/s against FlexAttention with the same
mask (1.5x asked) and against our dense kernel (0.8x asked). Then what the FlexAttention target
means in terms of our dense kernel: FlexAttention's block-sparse rate over its own dense rate (how
much it loses to sparsity), our dense rate over FlexAttention's dense rate (our dense margin), and
1.5 x FlexAttention's block-sparse rate over our dense rate, the share of our dense rate the target
asks for. A share above 1 asks the block-sparse kernel to run faster per FLOP than our dense one.
Needs a file with FlexAttention's dense rows (code from a0e468e on). Prints a Markdown table.

Usage: python research/blocksparse/targets.py [RESULT_JSON]
"""
import argparse
import json
import pathlib

from floors import density_bound_ms, index_rows  # the script beside this one

FLEX_FACTOR, DENSE_SHARE = 1.5, 0.8


def table(rows):
    index = index_rows(rows)
    lines = ["| d | N | layout | density | pass | time (ms) | bound (ms) | ours | flex | ours ÷ flex "
             "| ours ÷ our dense | flex ÷ flex dense | our dense ÷ flex dense "
             f"| {FLEX_FACTOR} x flex ÷ our dense |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    met = {"bound": [0, 0], "flex": [0, 0], "dense": [0, 0]}
    for (impl, d, n, layout, p), ours in sorted(index.items(), key=lambda kv: (
            kv[0][1], kv[0][2], kv[1]["density"], kv[0][4])):
        flex = index.get(("flex", d, n, layout, p))
        dense = index.get(("flash", d, n, "dense", p))
        flex_dense = index.get(("flex", d, n, "dense", p))
        if impl != "blocksparse" or not (flex and dense and flex_dense):
            continue
        rate, flex_rate = ours["tflops_effective"], flex["tflops_effective"]
        dense_rate, flex_dense_rate = dense["tflops_effective"], flex_dense["tflops_effective"]
        bound = "–"
        if p == "fwd+bwd":
            limit = density_bound_ms(ours, dense)
            bound = f"{limit:.3f}"
            met["bound"][0] += ours["ms"] <= limit
            met["bound"][1] += 1
        met["flex"][0] += rate >= FLEX_FACTOR * flex_rate
        met["dense"][0] += rate >= DENSE_SHARE * dense_rate
        met["flex"][1] += 1
        met["dense"][1] += 1
        lines.append(
            f"| {d} | {n} | {layout} | {ours['density']:.4f} | {p} | {ours['ms']:.3f} | {bound} "
            f"| {rate:.0f} | {flex_rate:.0f} | {rate / flex_rate:.2f} | {rate / dense_rate:.2f} "
            f"| {flex_rate / flex_dense_rate:.2f} | {dense_rate / flex_dense_rate:.2f} "
            f"| {FLEX_FACTOR * flex_rate / dense_rate:.2f} |")
    lines += ["", f"Met: density bound in {met['bound'][0]} of {met['bound'][1]} forward+backward "
              f"cells; {FLEX_FACTOR}x FlexAttention in {met['flex'][0]} of {met['flex'][1]} cells; "
              f"{DENSE_SHARE}x our dense rate in {met['dense'][0]} of {met['dense'][1]} cells."]
    return lines


def main():
    results = pathlib.Path(__file__).resolve().parents[2] / "reports" / "bench" / "blocksparse"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", nargs="?", default=results / "blocksparse.json")
    args = ap.parse_args()
    data = json.loads(pathlib.Path(args.result).read_text())
    env = data["environment"]
    print(f"{env['gpu']}, {env['date'][:10]}, commit {env['git_commit']}.\n")
    print("\n".join(table(data["rows"])))


if __name__ == "__main__":
    main()
