"""LRA Retrieval: ACL Anthology Network document pairs, byte-level, two towers.

Files `new_aan_pairs.{train,eval,test}.tsv`, one pair per line: label, id1, id2, text1, text2
(tab separated; an optional header line is skipped)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fa_train.errors import UserError

SPLIT_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
               "test": "new_aan_pairs.test.tsv"}
LAYOUT = "new_aan_pairs.{train,eval,test}.tsv with columns label, id1, id2, text1, text2"


def find_split_files(path: str | os.PathLike) -> dict[str, Path]:
    root = Path(path)
    for d in (root, root / "tsv_data", root / "lra_release" / "tsv_data"):
        files = {k: d / v for k, v in SPLIT_FILES.items()}
        if all(f.is_file() for f in files.values()):
            return files
    raise FileNotFoundError(f"no AAN retrieval data in {root}: expected {LAYOUT} "
                            "(the LRA release's lra_release/tsv_data/)")


def read_aan_tsv(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """(texts1, texts2, labels) of one AAN pairs file."""
    path = Path(path)
    t1, t2, labels = [], [], []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for k, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) < 5:
                raise UserError(f"{path}:{k}: expected 5 tab-separated columns "
                                 f"(label, id1, id2, text1, text2), got {len(parts)}")
            try:
                label = int(float(parts[0]))
            except ValueError:
                if k == 1:  # header
                    continue
                raise UserError(f"{path}:{k}: label {parts[0]!r} is not a number") from None
            labels.append(label)
            t1.append(parts[3])
            t2.append("\t".join(parts[4:]))
    return t1, t2, np.asarray(labels, np.int64)


def load_aan(path: str | os.PathLike) -> dict[str, tuple[list[str], list[str], np.ndarray]]:
    return {k: read_aan_tsv(f) for k, f in find_split_files(path).items()}
