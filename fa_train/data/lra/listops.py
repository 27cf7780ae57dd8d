"""ListOps (LRA): the seeded generator, the evaluator, the LRA TSV format and the tokenizer.

A tree is nested Python lists: an operator node is `[op, child, child, ...]` (op one of
`[MIN [MAX [MED [SM`), a leaf is an int 0..9. The released string format (LRA's
`to_string`) writes the binary-tuple form `( ( ( [MAX 2 ) 9 ) ] )` for `[MAX 2 9 ]`; the tokenizer
drops `(` and `)` so the model sees `[MAX 2 9 ]` (tokens `[MIN [MAX [MED [SM ]`, digits, pad).
"""
from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import random
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from fa_train.errors import UserError

MIN, MAX, MED, SM, END = "[MIN", "[MAX", "[MED", "[SM", "]"
OPERATORS = (MIN, MAX, MED, SM)
MAX_DEPTH = 10
MAX_ARGS = 10
LEAF_PROB = 0.75
MIN_LENGTH, MAX_LENGTH = 500, 2000  # kept iff MIN_LENGTH < length < MAX_LENGTH
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}

# vocabulary: pad 0, digits 1..10, operators 11..14, ']' 15
PAD_ID = 0
VOCAB = ["<pad>", *[str(d) for d in range(10)], *OPERATORS, END]
TOKEN_TO_ID = {t: i for i, t in enumerate(VOCAB)}
VOCAB_SIZE = len(VOCAB)
NUM_CLASSES = 10


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------
def generate_tree(rng: random.Random, depth: int = 1, max_depth: int = MAX_DEPTH,
                  max_args: int = MAX_ARGS):
    """One random tree and its length (1 per digit, 2 + children per operator), as LRA does:
    below `max_depth` a node is a leaf with probability 0.75, else an operator with 2..max_args
    children; at `max_depth` it is always a leaf."""
    if depth < max_depth and rng.random() >= LEAF_PROB:
        op = OPERATORS[rng.randrange(4)]
        node: list = [op]
        length = 2
        for _ in range(rng.randint(2, max_args)):
            child, n = generate_tree(rng, depth + 1, max_depth, max_args)
            node.append(child)
            length += n
        return node, length
    return rng.randrange(10), 1


def evaluate(tree) -> int:
    """Value of a tree: MIN, MAX, MED (median, floored), SM (sum mod 10)."""
    if isinstance(tree, int):
        return tree
    vals = [evaluate(c) for c in tree[1:]]
    return _apply(tree[0], vals)


def _apply(op: str, vals: list[int]) -> int:
    if op == MIN:
        return min(vals)
    if op == MAX:
        return max(vals)
    if op == MED:
        return int(np.floor(np.median(vals)))
    if op == SM:
        return sum(vals) % 10
    raise ValueError(f"unknown ListOps operator {op!r}; expected one of {OPERATORS}")


def to_string(tree) -> str:
    """The released LRA string: binary tuples ((op, a), b) ... closed by ']' , each in parens."""
    if isinstance(tree, int):
        return str(tree)
    s = f"( {tree[0]} {to_string(tree[1])} )"
    for child in tree[2:]:
        s = f"( {s} {to_string(child)} )"
    return f"( {s} {END} )"


def tokens_of(source: str) -> list[str]:
    """Model tokens of a source string: parentheses dropped, everything else kept."""
    return [t for t in source.split() if t not in ("(", ")")]


def evaluate_tokens(tokens: Sequence[str]) -> int:
    """Value of a token sequence (`[MAX 2 [MIN 3 4 ] ]`), parentheses already dropped."""
    stack: list[list] = []
    value = None
    for t in tokens:
        if t in OPERATORS:
            stack.append([t])
        elif t == END:
            if not stack:
                raise ValueError("unbalanced ']' in ListOps expression")
            node = stack.pop()
            v = _apply(node[0], node[1:])
            if stack:
                stack[-1].append(v)
            else:
                value = v
        else:
            d = int(t)
            if stack:
                stack[-1].append(d)
            else:
                value = d
    if stack or value is None:
        raise ValueError("incomplete ListOps expression")
    return value


def encode(source: str | Sequence[str]) -> np.ndarray:
    """Token ids (int16) of a source string or token list (parentheses dropped)."""
    toks = tokens_of(source) if isinstance(source, str) else [t for t in source if t not in ("(", ")")]
    try:
        return np.fromiter((TOKEN_TO_ID[t] for t in toks), dtype=np.int16, count=len(toks))
    except KeyError as e:
        raise ValueError(f"unknown ListOps token {e.args[0]!r}; expected digits, {OPERATORS} or ']'") from None


def _chunk_seed(seed: int, chunk: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(chunk)]).generate_state(1, np.uint64)[0])


def _gen_chunk(args) -> list[tuple[str, int]]:
    seed, chunk, size, min_len, max_len, max_depth, max_args = args
    rng = random.Random(_chunk_seed(seed, chunk))
    out = []
    while len(out) < size:
        tree, n = generate_tree(rng, 1, max_depth, max_args)
        if min_len < n < max_len:
            out.append((to_string(tree), evaluate(tree)))
    return out


def generate_listops(n: int, seed: int = 0, workers: int = 1, min_length: int = MIN_LENGTH,
                     max_length: int = MAX_LENGTH, max_depth: int = MAX_DEPTH,
                     max_args: int = MAX_ARGS, chunk_size: int = 256,
                     progress=None) -> list[tuple[str, int]]:
    """`n` distinct (source string, label) pairs. Deterministic for a seed, whatever `workers`:
    chunk k draws from its own stream (seed, k); chunks are merged in order, deduplicated."""
    seen: set[str] = set()
    out: list[tuple[str, int]] = []
    chunk = 0
    pool = None
    if workers > 1:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        pool = ctx.Pool(workers)
    try:
        while len(out) < n:
            need = n - len(out)
            k = max(1, min(workers * 4, (need + chunk_size - 1) // chunk_size))
            jobs = [(seed, chunk + i, chunk_size, min_length, max_length, max_depth, max_args)
                    for i in range(k)]
            chunk += k
            results = pool.imap(_gen_chunk, jobs) if pool is not None else map(_gen_chunk, jobs)
            for res in results:
                for src, label in res:
                    if len(out) < n and src not in seen:
                        seen.add(src)
                        out.append((src, label))
                        if progress is not None:
                            progress(1)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return out


# ----------------------------------------------------------------------------------------------
# TSV I/O (LRA format: header `Source\tTarget`)
# ----------------------------------------------------------------------------------------------
def write_tsv(path: str | os.PathLike, rows: Iterable[tuple[str, int]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["Source", "Target"])
        for src, label in rows:
            w.writerow([src, int(label)])
    return path


def read_tsv(path: str | os.PathLike) -> list[tuple[str, int]]:
    """(source, label) rows of an LRA ListOps TSV (`Source\\tTarget` header)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ListOps file {path} not found; expected an LRA TSV with a "
                                "'Source\\tTarget' header (basic_train.tsv, basic_val.tsv, basic_test.tsv)")
    rows = []
    with open(path, newline="") as f:
        header = f.readline().rstrip("\n").split("\t")
        if [h.strip() for h in header[:2]] != ["Source", "Target"]:
            raise UserError(f"{path}: first line {header!r} is not the LRA header 'Source\\tTarget'")
        for k, line in enumerate(f, start=2):
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise UserError(f"{path}:{k}: expected 'source<TAB>target', got {line[:80]!r}")
            rows.append((parts[0], int(float(parts[1]))))
    return rows


def find_split_files(data_dir: str | os.PathLike) -> dict[str, Path]:
    """basic_{train,val,test}.tsv in `data_dir` (or its `listops/`, `lra_release/listops-1000/`)."""
    root = Path(data_dir)
    for d in (root, root / "listops", root / "listops-1000", root / "lra_release" / "listops-1000"):
        files = {k: d / v for k, v in SPLIT_FILES.items()}
        if all(f.is_file() for f in files.values()):
            return files
    raise FileNotFoundError(
        f"no ListOps data in {root}: expected basic_train.tsv, basic_val.tsv and basic_test.tsv "
        "(the LRA release's listops-1000/ or `fa-data listops --out DIR`)")


def write_listops(out: str | os.PathLike, n_train: int = 96_000, n_val: int = 2_000,
                  n_test: int = 2_000, seed: int = 0, workers: int = 1,
                  progress: bool = True, **gen_kwargs) -> dict[str, Any]:
    """Generate the three splits (distinct expressions across all) into `out/basic_*.tsv`."""
    out = Path(out)
    total = n_train + n_val + n_test
    t0 = time.perf_counter()
    prog = None
    cb = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        prog = Progress(TextColumn("[bold]listops"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn())
        prog.start()
        task = prog.add_task("listops", total=total)
        cb = lambda k: prog.advance(task, k)  # noqa: E731
    try:
        rows = generate_listops(total, seed=seed, workers=workers, progress=cb, **gen_kwargs)
    finally:
        if prog is not None:
            prog.stop()
    splits = {"train": rows[:n_train], "val": rows[n_train:n_train + n_val],
              "test": rows[n_train + n_val:]}
    for name, part in splits.items():
        write_tsv(out / SPLIT_FILES[name], part)
    lengths = [len(tokens_of(s)) for s, _ in rows]
    counts = np.bincount([lab for _, lab in rows], minlength=NUM_CLASSES)
    summary = {
        "dir": str(out), "n_train": n_train, "n_val": n_val, "n_test": n_test, "seed": seed,
        "workers": workers, "seconds": round(time.perf_counter() - t0, 3),
        "mean_length": round(float(np.mean(lengths)), 1) if lengths else 0,
        "max_length": int(max(lengths)) if lengths else 0,
        "label_counts": counts.tolist(),
    }
    (out / "generator.json").write_text(json.dumps(summary, indent=2))
    return summary


def _cli(args) -> int:
    from rich.console import Console
    from rich.table import Table

    s = write_listops(args.out, args.n_train, args.n_val, args.n_test, args.seed, args.workers,
                      progress=not args.no_progress)
    table = Table(title="fa-data listops")
    table.add_column("key")
    table.add_column("value")
    for k, v in s.items():
        table.add_row(k, str(v))
    Console().print(table)
    return 0


def register_cli(subparsers) -> None:
    """Add `fa-data listops ...` to an argparse subparsers object (handler in `func`)."""
    p = subparsers.add_parser("listops", help="generate LRA ListOps TSVs (basic_{train,val,test}.tsv)")
    p.add_argument("--out", required=True)
    p.add_argument("--n-train", type=int, default=96_000)
    p.add_argument("--n-val", type=int, default=2_000)
    p.add_argument("--n-test", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cli)
