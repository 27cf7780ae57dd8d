"""How much can masked-token pretraining learn on ListOps? The floors of its loss and accuracy.

The generator draws every digit (one of 10) and every operator (one of 4) uniformly and
independently of the tree's shape, so from any context only a masked token's type (digit,
operator, ']') can be predicted; its identity within the type cannot. The masked-token loss of
any model is therefore at least H(type | context) + p(digit) ln 10 + p(operator) ln 4, and its
accuracy at most p(']') + p(digit) / 10 + p(operator) / 4 when the type is known. This probe
measures, on freshly generated expressions (full length, 15% of the tokens masked as in
lra/listops_pretrain): the token shares, the unigram entropy and the majority share (what the
runs log as val/acc_majority), and a held-out estimate of H(type | the types of the k tokens on
each side) for k = 0..3 (counts fitted on one part of the expressions, scored on the rest). It
prints these beside the validation loss and accuracy of the listops_plateau self-pretraining runs
read from their metrics.json, and writes JSON.

Run on 2026-12-04 (CPU, 25 s; reports/bench/listops_masked_floor/floors.json): unigram 2.639
nats, identity floor 1.845, best accuracy with known types 24.9%; the neighbours' types lower the
attainable loss by 0.05-0.10 nats (k = 1: 2.589, k = 3: 2.532; accuracy 15.2-16.2%). The GPU runs
(all 5K steps, 2026-12-07) ended at 2.636-2.637 and 14.2%, the estimate without context (k = 0:
2.636, 14.0%): they learned the token shares and nothing of their neighbours.

Usage: python research/listops_masked_floor/floors.py OUT_DIR [--n 3000] [--seed 7]
"""
from __future__ import annotations

import argparse
import collections
import json
import math
from pathlib import Path

import numpy as np

from fa_train.data.lra import listops

MASK_PROB = 0.15
DIGITS = [listops.TOKEN_TO_ID[str(d)] for d in range(10)]
OPS = [listops.TOKEN_TO_ID[op] for op in listops.OPERATORS]
END = listops.TOKEN_TO_ID[listops.END]
MASKED, EDGE = 3, 4  # context-only types: a masked neighbour, beyond the sequence's ends
TYPES = np.full(listops.VOCAB_SIZE, EDGE, dtype=np.int64)   # token id -> 0 digit, 1 operator, 2 ']'
TYPES[DIGITS], TYPES[OPS], TYPES[END] = 0, 1, 2
WITHIN = np.array([1 / len(DIGITS), 1 / len(OPS), 1.0])   # chance of the identity, type known
RUNS = Path("reports/listops_plateau/gpu")


def masked_samples(seqs, k: int, rng: np.random.Generator):
    """(context of the k types each side, the masked token's type) for every masked token."""
    out = []
    for s in seqs:
        t = TYPES[s]
        masked = rng.random(len(s)) < MASK_PROB
        seen = np.where(masked, MASKED, t)
        padded = np.concatenate([np.full(k, EDGE), seen, np.full(k, EDGE)])
        for i in np.flatnonzero(masked):
            out.append((tuple(padded[i:i + k]) + tuple(padded[i + k + 1:i + 2 * k + 1]), t[i]))
    return out


def type_floor(train, test) -> tuple[float, float]:
    """Held-out type entropy given the context (add-0.1 counts) and the best token accuracy of
    answering each context's best bet (a ']' is always right, a digit 1 in 10, an operator 1 in 4)."""
    counts: dict = collections.defaultdict(lambda: np.full(3, 0.1))
    for ctx, y in train:
        counts[ctx][y] += 1
    loss = acc = 0.0
    for ctx, y in test:
        p = counts[ctx] / counts[ctx].sum()
        loss -= math.log(p[y])
        bet = int(np.argmax(p * WITHIN))
        acc += WITHIN[bet] if bet == y else 0.0
    return loss / len(test), acc / len(test)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=3000, help="expressions generated (default 3000)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rows = listops.generate_listops(args.n, seed=args.seed, workers=2)
    seqs = [listops.encode(src).astype(np.int64) for src, _ in rows]
    counts = np.bincount(np.concatenate(seqs), minlength=listops.VOCAB_SIZE)
    share = counts / counts.sum()
    nz = share[share > 0]
    by_type = np.bincount(TYPES, weights=share, minlength=EDGE)[:3]
    p_digit, p_op, p_end = by_type
    identity = -(by_type * np.log(WITHIN)).sum()   # nats no context can remove
    split = int(0.8 * len(seqs))
    rng = np.random.default_rng(args.seed)
    by_k = []
    for k in range(4):
        train = masked_samples(seqs[:split], k, rng)
        test = masked_samples(seqs[split:], k, rng)
        h_type, acc = type_floor(train, test)
        by_k.append({"k": k, "type_loss": h_type, "token_loss_floor": h_type + identity,
                     "best_token_acc": acc, "masked_tokens_scored": len(test)})
    runs = {}
    for path in sorted(RUNS.glob("spt-seed*/metrics.json")):
        m = json.loads(path.read_text())
        runs[path.parent.name] = {key: m.get(key) for key in
                                  ("global_step", "val/loss", "val/acc", "val/acc_majority")}
    result = {
        "expressions": args.n, "seed": args.seed, "tokens": int(counts.sum()),
        "mean_length": float(np.mean([len(s) for s in seqs])),
        "share": {"digit": float(p_digit), "operator": float(p_op), "]": float(p_end)},
        "unigram_loss": float(-(nz * np.log(nz)).sum()), "majority_share": float(share.max()),
        "identity_floor": float(identity),
        "best_acc_known_type": float(by_type @ WITHIN),
        "by_neighbours": by_k, "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "floors.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"token shares: digit {p_digit:.3f}, operator {p_op:.3f}, ']' {p_end:.3f}; "
          f"majority {result['majority_share']:.3f}")
    print(f"unigram loss {result['unigram_loss']:.3f} nats; identity floor {identity:.3f}; "
          f"best accuracy with known types {result['best_acc_known_type']:.3f}")
    print("| neighbours each side | type loss | token loss floor | best token accuracy |")
    print("|---|---|---|---|")
    for row in by_k:
        print(f"| {row['k']} | {row['type_loss']:.3f} | {row['token_loss_floor']:.3f} "
              f"| {row['best_token_acc']:.3f} |")
    for name, m in runs.items():
        print(f"{name}: step {m['global_step']}, val/loss {m['val/loss']:.3f}, "
              f"val/acc {m['val/acc']:.3f}, val/acc_majority {m['val/acc_majority']:.3f}")


if __name__ == "__main__":
    main()
