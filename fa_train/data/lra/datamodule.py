"""LightningDataModules for the Long-Range Arena tasks.

Generated tasks (ListOps, Pathfinder) read `data_dir` when it holds data (the LRA release or
`fa-data` output) and otherwise generate into `cache_dir` once (keyed by seed and sizes).
User-supplied tasks (Text, Retrieval, Image) need `data_dir` in the original format."""
from __future__ import annotations

import fcntl
import functools
import os
import shutil
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from fa_train.data.lra import image as image_mod
from fa_train.data.lra import listops as listops_mod
from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra.pathfinder.symmetry import SymmetricImages
from fa_train.data.lra import retrieval as retrieval_mod
from fa_train.data.lra import text as text_mod
from fa_train.data.lm import info
from fa_train.data.lra.base import MapDataset, SequenceClassificationDataModule, take
from fa_train.errors import PreparationPaused, UserError, check_choice

DEFAULT_CACHE = ".cache/fa_train"


def _atomic_dir(final: Path, fill) -> Path:
    """Run fill(work_dir) and move the result to `final` (readers never see half a dataset).
    Processes that ask for the same `final` at once wait on a lock file: one fills, the rest
    find it done. A fill stopped by PreparationPaused leaves `<final>.partial` for the next call
    to continue in; any other failure removes it."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / (final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.exists():
            return final
        work = final.parent / (final.name + ".partial")
        work.mkdir(exist_ok=True)
        try:
            fill(work)
        except PreparationPaused:
            raise
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        os.replace(work, final)
    return final


def _gen_workers(n) -> int:
    """Generator processes: `n`, or 0 for one per CPU core this process may use."""
    n = int(n)
    if n < 0:
        raise UserError(f"data.gen_workers must be >= 0 (0: one per CPU core), got {n}")
    return n or len(os.sched_getaffinity(0))


def _told(summary: dict, what: str, n: int) -> dict:
    """Report a generation's size, time and rate (the generator's summary) to the run's log."""
    kept = int(summary.get("continued_from", 0))
    made, seconds = n - kept, max(summary["seconds"], 1e-9)
    after = f", after {kept} kept from an earlier start" if kept else ""
    info(f"generated {made} {what} in {summary['seconds']:.1f} s "
         f"({made / seconds:.0f}/s, gen_workers={summary['workers']}){after}")
    return summary


def _flatten(x) -> np.ndarray:
    return np.asarray(x).reshape(-1)


def _encode_pair(pair, max_length: int):
    return (text_mod.encode_bytes(pair[0], max_length), text_mod.encode_bytes(pair[1], max_length))


# ----------------------------------------------------------------------------------------------
class ListOpsDataModule(SequenceClassificationDataModule):
    """ListOps: 10 classes, vocab 16 (pad 0), sequences padded to `max_length` (2000).

    data_dir: folder with basic_{train,val,test}.tsv (LRA release or `fa-data listops`); None:
    generate n_train/n_val/n_test (default 2000/200/200) from `gen_seed` into `cache_dir` once.
    `seed` only drives the shuffling."""

    def __init__(self, data_dir: str | None = None, cache_dir: str = DEFAULT_CACHE,
                 max_length: int = 2000, n_train: int | None = None, n_val: int | None = None,
                 n_test: int | None = None, gen_workers: int = 1, gen_seed: int = 0,
                 batch_size: int = 32, num_workers: int = 0, seed: int = 0, **kw):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, **kw)
        self.gen_seed = int(gen_seed)
        self.data_dir, self.cache_dir = data_dir, cache_dir
        self.max_length = int(max_length)
        self.n = (n_train, n_val, n_test)
        self.gen_workers = _gen_workers(gen_workers)

    def _generated_dir(self) -> Path:
        n_tr, n_va, n_te = (x if x is not None else d for x, d in zip(self.n, (2000, 200, 200)))
        return Path(self.cache_dir) / "lra_listops" / f"seed{self.gen_seed}_{n_tr}_{n_va}_{n_te}"

    def prepare_data(self) -> None:
        if self.data_dir is not None:
            listops_mod.find_split_files(self.data_dir)  # clear error when missing
            return
        n_tr, n_va, n_te = (x if x is not None else d for x, d in zip(self.n, (2000, 200, 200)))
        _atomic_dir(self._generated_dir(), lambda d: _told(listops_mod.write_listops(
            d, n_tr, n_va, n_te, seed=self.gen_seed, workers=self.gen_workers, progress=False),
            "ListOps examples", n_tr + n_va + n_te))

    def build(self) -> dict[str, Dataset]:
        self.prepare_data()
        root = self.data_dir if self.data_dir is not None else self._generated_dir()
        files = listops_mod.find_split_files(root)
        self.vocab_size, self.seq_len = listops_mod.VOCAB_SIZE, self.max_length
        self.num_classes = listops_mod.NUM_CLASSES
        self.pad_id = listops_mod.PAD_ID
        out = {}
        for (split, f), n in zip(files.items(), self.n):
            rows = listops_mod.read_tsv(f)
            rows = rows if n is None else rows[:n]
            out[split] = MapDataset([r[0] for r in rows], np.asarray([r[1] for r in rows], np.int64),
                                    listops_mod.encode)
        return out


# ----------------------------------------------------------------------------------------------
class PathfinderDataModule(SequenceClassificationDataModule):
    """Pathfinder-32/64, Path-X (128), Path-256: pixels 0..255 as tokens (vocab 256), seq_len R².

    data_dir: a level folder or a root holding `pathfinder{R}/curv_contour_length_{L}/` (LRA
    release PNGs or `fa-data pathfinder` shards); split 80/10/10 deterministically (n_* cap the
    splits). None: generate n_train + n_val + n_test images (default 800/100/100) from `gen_seed`
    into `cache_dir` once, in parallel with `gen_workers` processes (0: one per CPU core). `seed`
    only drives shuffling and, with `augment="dihedral"`, which of the square's 8 symmetries each
    training sample gets (validation and test images stay as drawn). `prepare_deadline` (Unix
    time, set from the run's `pause_at`): a generation still going then stops with
    PreparationPaused and continues at the next start."""

    prepare_deadline: float | None = None

    def __init__(self, resolution: int = 32, difficulty: str = "hard", data_dir: str | None = None,
                 cache_dir: str = DEFAULT_CACHE, n_train: int | None = None,
                 n_val: int | None = None, n_test: int | None = None,
                 num_distractors: int | None = None, gen_workers: int = 1, gen_seed: int = 0,
                 split_seed: int = 0, augment: str | None = None, batch_size: int = 32,
                 num_workers: int = 0, seed: int = 0, **kw):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, **kw)
        self.gen_seed = int(gen_seed)
        self.augment = check_choice("data.augment", augment, (None, "dihedral"))
        self.params = pf.pathfinder_params(resolution, difficulty, num_distractors)
        self.resolution, self.difficulty = int(resolution), difficulty
        self.data_dir, self.cache_dir = data_dir, cache_dir
        self.n = (n_train, n_val, n_test)
        self.gen_workers, self.split_seed = _gen_workers(gen_workers), int(split_seed)
        self.num_distractors = num_distractors

    def _gen_counts(self) -> tuple[int, int, int]:
        return tuple(x if x is not None else d for x, d in zip(self.n, (800, 100, 100)))

    def _generated_dir(self) -> Path:
        total = sum(self._gen_counts())
        nd = self.params.n_distractors
        return (Path(self.cache_dir) / "lra_pathfinder"
                / f"r{self.resolution}_{self.difficulty}_seed{self.gen_seed}_n{total}_d{nd}"
                  f"_g{pf.GENERATOR_VERSION}")

    def prepare_data(self) -> None:
        if self.data_dir is not None:
            pf.find_level(Path(self.data_dir), self.resolution, self.params.contour_length)
            return
        total = sum(self._gen_counts())
        _atomic_dir(self._generated_dir(), lambda d: _told(pf.generate_pathfinder(
            d, self.resolution, self.difficulty, total, seed=self.gen_seed, workers=self.gen_workers,
            fmt="npy", num_distractors=self.num_distractors, progress=False,
            deadline=self.prepare_deadline),
            f"Pathfinder-{self.resolution} images", total))

    def build(self) -> dict[str, Dataset]:
        self.prepare_data()
        if self.data_dir is not None:
            src = pf.PathfinderImages(self.data_dir, self.resolution, self.params.contour_length)
            parts = pf.split_indices(len(src), self.split_seed)
            parts = {k: v[: take(n, len(v))] for (k, v), n in zip(parts.items(), self.n)}
        else:
            src = pf.PathfinderImages(self._generated_dir(), self.resolution, self.params.contour_length)
            parts = pf.split_indices(len(src), self.split_seed, counts=self._gen_counts())
        if src.resolution != self.resolution:
            raise UserError(f"resolution {self.resolution} was asked for but the images in "
                             f"{src.dir} are {src.resolution}x{src.resolution}")
        self.source = src
        self.vocab_size, self.seq_len, self.num_classes = 256, self.resolution ** 2, 2
        self.image_size = self.resolution
        out = {k: MapDataset(src, src.labels, _flatten, index=v) for k, v in parts.items()}
        if self.augment:
            out["train"] = SymmetricImages(src, src.labels, parts["train"], self.seed)
        return out


# ----------------------------------------------------------------------------------------------
class _ReleasedBytesDataModule(SequenceClassificationDataModule):
    """A byte-level task read from the released files in `data_dir`, truncated or padded to
    `max_length` bytes, with optional subsets of n_train / n_val / n_test examples."""

    max_length_default = 4096

    def __init__(self, data_dir: str, max_length: int | None = None, n_train: int | None = None,
                 n_val: int | None = None, n_test: int | None = None, batch_size: int = 32,
                 num_workers: int = 0, seed: int = 0, **kw):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, **kw)
        self.data_dir, self.n = data_dir, (n_train, n_val, n_test)
        self.max_length = int(max_length or self.max_length_default)


class TextDataModule(_ReleasedBytesDataModule):
    """IMDb byte-level (vocab 257: pad 0, byte b -> b+1), 2 classes; test doubles as validation.
    data_dir: the `aclImdb/` folder (train/{pos,neg}, test/{pos,neg})."""

    def build(self) -> dict[str, Dataset]:
        if self.data_dir is None:
            raise FileNotFoundError(f"data_dir is required for LRA Text; expected {text_mod.LAYOUT}")
        data = text_mod.load_imdb(self.data_dir)
        self.vocab_size, self.seq_len, self.num_classes = text_mod.BYTE_VOCAB_SIZE, self.max_length, 2
        enc = functools.partial(text_mod.encode_bytes, max_length=self.max_length)
        out = {}
        for split, src, n in (("train", "train", self.n[0]), ("val", "test", self.n[1]),
                              ("test", "test", self.n[2])):
            texts, labels = data[src]
            idx = np.arange(len(labels))
            if n is not None and n < len(idx):  # seeded subset (files are sorted neg, then pos)
                idx = np.sort(np.random.default_rng(0).permutation(len(idx))[:n])
            out[split] = MapDataset(texts, labels, enc, index=idx)
        return out


class RetrievalDataModule(_ReleasedBytesDataModule):
    """AAN pairs, byte-level, two towers: input_ids/attention_mask are (B, 2, max_length).
    data_dir: folder with new_aan_pairs.{train,eval,test}.tsv."""

    num_towers = 2
    max_length_default = 4000

    def build(self) -> dict[str, Dataset]:
        if self.data_dir is None:
            raise FileNotFoundError(f"data_dir is required for LRA Retrieval; expected {retrieval_mod.LAYOUT}")
        data = retrieval_mod.load_aan(self.data_dir)
        self.vocab_size, self.seq_len, self.num_classes = text_mod.BYTE_VOCAB_SIZE, self.max_length, 2
        enc = functools.partial(_encode_pair, max_length=self.max_length)
        out = {}
        for (split, (t1, t2, labels)), n in zip(data.items(), self.n):
            k = take(n, len(labels))
            out[split] = MapDataset(list(zip(t1[:k], t2[:k])), labels[:k], enc)
        return out


class ImageDataModule(SequenceClassificationDataModule):
    """CIFAR-10 grayscale, 1024 pixel tokens (vocab 256), 10 classes, 45K/5K/10K.
    data_dir: `cifar-10-batches-py/` (data_batch_1..5, test_batch)."""

    def __init__(self, data_dir: str, n_val: int = 5000, batch_size: int = 256,
                 num_workers: int = 0, seed: int = 0, n_train: int | None = None,
                 n_test: int | None = None, **kw):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, **kw)
        self.data_dir, self.n_val, self.n = data_dir, int(n_val), (n_train, None, n_test)

    def build(self) -> dict[str, Dataset]:
        if self.data_dir is None:
            raise FileNotFoundError(f"data_dir is required for LRA Image; expected {image_mod.LAYOUT}")
        data = image_mod.load_cifar10_gray(self.data_dir, self.n_val)
        self.vocab_size, self.seq_len, self.num_classes = 256, 1024, 10
        self.image_size = 32
        out = {}
        for (split, (x, y)), n in zip(data.items(), self.n):
            k = take(n, len(y))
            out[split] = MapDataset(x[:k], y[:k], _flatten)
        return out
