"""Language-model data: any text source -> tokenizer -> one cached token memmap per split -> windows.

Sources (``source``):
- a corpus preset, ``"python-docs"`` (the offline default) or ``"large"`` (`fa_train.data.corpus`), with
  its own val/test splits;
- ``"text"``, ``"json"``, ``"parquet"``, ``"csv"``: local files via ``datasets.load_dataset(fmt,
  data_files=...)``; ``data_files`` is a path, a list of paths, or {split: path(s)};
- anything else: a `datasets` hub name (e.g. ``"openwebtext"``), which needs the network.
Sources without a validation/test split get them from train by a seeded split (``val_fraction``,
``test_fraction``, at least one document each, ``split_seed``: independent of the training ``seed``,
so every run of an experiment is scored on the same documents).

The token memmaps (``uint16`` when the vocabulary fits, else ``uint32``; documents joined by the
end-of-text token) live in ``<cache_dir>/lm/<name>-<hash>/`` where the hash covers the source, the
tokenizer and every parameter that changes the tokens; ``seq_len`` does not, so any window length
reuses them. A second run finds ``meta.json`` there and reuses the memmaps without tokenizing.

Windows: ``seq_len + 1`` tokens, ``input_ids = w[:-1]``, ``labels = w[1:]`` (both int64). Train windows
start at random offsets (``train_samples_per_epoch`` of them per epoch, default one pass's worth);
``windows_per_draw=k`` cuts each random draw of ``k * seq_len`` tokens into ``k`` consecutive windows
(samples ``k*d ... k*d+k-1``), so a batch at context ``seq_len`` holds as many independent spans of
text as one at context ``k * seq_len`` with the same tokens. Validation and test windows are
contiguous and non-overlapping, every token predicted once.

Exact resume: the train window of sample ``j`` in epoch ``e`` is a pure function of (seed, e, j)
(see `EpochSampler` and `TokenWindows`), and the train loader is a `ResumableDataLoader`, whose
``state_dict`` (epoch, samples consumed) Lightning stores in every checkpoint and hands back on
``trainer.fit(..., ckpt_path=...)``; the resumed run then continues with exactly the next window.
"""
from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from fa_train.data.spec import DataSpec
from fa_train.data.tokenizer import EOT, KINDS as TOKENIZER_KINDS, MIN_BPE_VOCAB, build_tokenizer
from fa_train.utils.resumable import EpochSampler, train_loader  # noqa: F401 - EpochSampler re-exported
from fa_train.errors import UserError, check_choice, check_float, check_int, check_loader_config

log = logging.getLogger(__name__)
SPLITS = ("train", "validation", "test")
FILE_FORMATS = ("text", "json", "parquet", "csv")
_SPLIT_ALIASES = {"valid": "validation", "val": "validation", "dev": "validation"}


def info(msg: str) -> None:
    """Tell the person running the job (printed once, on global rank 0)."""
    if int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0:
        print(f"[fa-data] {msg}", flush=True)
    log.info(msg)


# ----------------------------------------------------------------------------- sources
def check_data_file(path: Path, fmt: str | None = None) -> None:
    """A user's data file as it enters: present, not empty, and (for the text formats) UTF-8 text."""
    if not path.is_file():
        raise UserError(f"data file {path}: not found")
    if path.stat().st_size == 0:
        raise UserError(f"data file {path}: is empty")
    if fmt in ("text", "json", "csv"):
        with path.open("rb") as f:
            head = f.read(1 << 16)
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError as err:
            raise UserError(f"data file {path}: not UTF-8 text (undecodable byte at offset "
                            f"{err.start}); expected a {fmt} file") from None
        if b"\x00" in head:
            raise UserError(f"data file {path}: contains NUL bytes (binary?); expected a {fmt} file")


def _files_identity(data_files: Any, fmt: str | None = None) -> Any:
    """data_files with absolute paths, sizes and mtimes (so edited files invalidate the cache);
    each file is checked on the way (`check_data_file`)."""
    if isinstance(data_files, dict):
        return {k: _files_identity(v, fmt) for k, v in sorted(data_files.items())}
    if isinstance(data_files, (list, tuple)):
        return [_files_identity(v, fmt) for v in data_files]
    p = Path(str(data_files)).expanduser()
    if not p.exists() and any(c in str(data_files) for c in "*?["):
        return str(p.absolute())
    check_data_file(p, fmt)
    st = p.stat()
    return [str(p.resolve()), st.st_size, int(st.st_mtime)]


def source_identity(source: str, data_files: Any = None, text_field: str = "text", dataset_config: str | None = None,
                    val_fraction: float = 0.0005, test_fraction: float = 0.0005, split_seed: int = 0,
                    cache_dir: str | Path = "data_cache") -> dict:
    """What determines the raw text of each split (for cache keys); validates the arguments."""
    if source in FILE_FORMATS and not data_files:
        raise UserError(f"data.data_files is required for data.source={source!r} "
                        "(a path, a list of paths or {split: path})")
    ident = {"source": source, "data_files": _files_identity(data_files, source) if data_files else None,
             "text_field": text_field, "dataset_config": dataset_config}
    from fa_train.data.corpus import PRESETS, preset_identity
    if source in PRESETS:
        return {**ident, **preset_identity(source, cache_dir)}
    if isinstance(data_files, dict) and {"validation", "test"} <= {_SPLIT_ALIASES.get(k, k) for k in data_files}:
        return ident  # nothing is split off train
    return {**ident, "val_fraction": val_fraction, "test_fraction": test_fraction, "split_seed": split_seed}


def _listing(files: Any) -> str:
    """The file names of a data_files value, comma-separated."""
    if isinstance(files, dict):
        return ", ".join(_listing(v) for v in files.values())
    return ", ".join(map(str, files)) if isinstance(files, (list, tuple)) else str(files)


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of a chained exception, as 'Type: first line'."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def digest(obj: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def load_text_splits(source: str, cache_dir: str | Path, data_files: Any = None, text_field: str = "text",
                     dataset_config: str | None = None, val_fraction: float = 0.0005, test_fraction: float = 0.0005,
                     split_seed: int = 0):
    """A `datasets.DatasetDict` with splits train/validation/test and a single column ``text``."""
    import datasets

    hf_cache = str(Path(cache_dir) / "hf_datasets")
    from fa_train.data.corpus import PRESETS, prepare_preset
    if source in PRESETS:
        files = {s: str(p) for s, p in prepare_preset(source, cache_dir).items()}
        dd = datasets.load_dataset("json", data_files=files, cache_dir=hf_cache)
    elif source in FILE_FORMATS:
        if not data_files:
            raise UserError(f"data.data_files is required for data.source={source!r}")
        if not isinstance(data_files, dict):
            data_files = {"train": data_files}
        data_files = {k: [str(Path(str(f)).expanduser()) for f in ([v] if isinstance(v, (str, Path)) else v)]
                      for k, v in data_files.items()}
        try:
            dd = datasets.load_dataset(source, data_files=data_files, cache_dir=hf_cache)
        except Exception as e:  # noqa: BLE001 - any parser failure is the file's problem
            raise UserError(f"data files {_listing(data_files)}: unreadable as {source} "
                            f"({_root_cause(e)})") from e
    else:
        try:
            dd = datasets.load_dataset(source, dataset_config, cache_dir=hf_cache)
        except Exception as e:  # offline, unknown name, ...
            raise RuntimeError(f"could not load the `datasets` hub source {source!r} ({type(e).__name__}: {e}). "
                               "Hub sources need the network; offline, use source=python-docs or local files "
                               "(source=text|json|parquet data_files=...).") from e
    dd = datasets.DatasetDict({_SPLIT_ALIASES.get(k, k): v for k, v in dd.items()})
    if "train" not in dd:
        raise UserError(f"data.source={source!r} has no train split (splits: {sorted(dd)})")
    for name, ds in dd.items():
        if text_field not in ds.column_names:
            where = _listing(data_files.get(name, data_files)) if isinstance(data_files, dict) else repr(source)
            raise UserError(f"data files {where}: no field data.text_field={text_field!r} in split "
                            f"{name} (fields: {', '.join(ds.column_names)})")
    dd = datasets.DatasetDict({k: v.select_columns([text_field]).rename_columns({text_field: "text"})
                               if text_field != "text" else v.select_columns(["text"]) for k, v in dd.items()})
    missing = [s for s in ("validation", "test") if s not in dd]
    if missing:
        train = dd["train"]
        n = len(train)
        sizes = {s: max(1, round(n * (val_fraction if s == "validation" else test_fraction))) for s in missing}
        if n - sum(sizes.values()) < 1:
            raise UserError(f"data.source={source!r} has {n} training documents, too few to split off "
                            f"{' and '.join(missing)}")
        parts = train.train_test_split(test_size=sum(sizes.values()), seed=split_seed, shuffle=True)
        dd["train"], held = parts["train"], parts["test"]
        if len(missing) == 2:
            held = held.train_test_split(test_size=sizes["test"], seed=split_seed, shuffle=False)
            dd["validation"], dd["test"] = held["train"], held["test"]
        else:
            dd[missing[0]] = held
    return datasets.DatasetDict({s: dd[s] for s in SPLITS})


def iter_texts(ds, batch_size: int = 1000) -> Iterator[str]:
    for batch in ds.iter(batch_size=batch_size):
        yield from batch["text"]


# ----------------------------------------------------------------------------- memmaps
def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65536), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def write_memmap(ds, column: str, path: Path, dtype: np.dtype, batch_size: int = 8192) -> int:
    """Concatenate the integer lists of ``ds[column]`` into a flat memmap file; returns its length."""
    import pyarrow.compute as pc

    batches = lambda: ds.with_format("arrow").iter(batch_size=batch_size)  # noqa: E731
    total = sum(int(pc.sum(pc.list_value_length(b[column])).as_py() or 0) for b in batches())
    tmp = path.with_name(path.name + ".tmp")
    arr = np.memmap(tmp, dtype=dtype, mode="w+", shape=(max(total, 1),))
    pos = 0
    for batch in batches():
        chunk = batch[column].combine_chunks().flatten().to_numpy()
        arr[pos:pos + len(chunk)] = chunk
        pos += len(chunk)
    assert pos == total, (pos, total)
    arr.flush()
    del arr
    os.replace(tmp, path)
    return total


# ----------------------------------------------------------------------------- datasets and sampling
class TokenWindows(Dataset):
    """Windows of ``seq_len + 1`` tokens from a 1-D token memmap.

    Eval mode (``seed=None``): item ``i`` starts at ``i * seq_len`` (contiguous, non-overlapping
    predictions). Train mode: item ``g`` (any integer, see `EpochSampler`) is window ``g % k`` of
    draw ``g // k`` (``k = windows_per_draw``), a span of ``k * seq_len`` tokens at a random offset
    that depends only on (seed, g // k), so any worker, rank or resumed run draws the same window.
    """

    def __init__(self, path: str | Path, dtype: str, num_tokens: int, seq_len: int,
                 seed: int | None = None, num_samples: int | None = None, windows_per_draw: int = 1):
        span = seq_len * windows_per_draw if seed is not None else seq_len
        if num_tokens < span + 1:
            draws = f" x windows_per_draw={windows_per_draw}" if span != seq_len else ""
            raise UserError(f"seq_len={seq_len}{draws} needs at least {span + 1} tokens, but "
                            f"{Path(path).name} has {num_tokens}; lower seq_len or use a larger corpus")
        self.path, self.dtype, self.num_tokens, self.seq_len = str(path), dtype, num_tokens, seq_len
        self.seed, self.windows_per_draw, self._data = seed, windows_per_draw, None
        self.num_windows = (num_tokens - 1) // seq_len
        self.num_samples = num_samples or self.num_windows

    def __len__(self) -> int:
        return self.num_samples if self.seed is not None else self.num_windows

    @property
    def data(self) -> np.ndarray:  # opened lazily so the dataset pickles cheaply into workers
        if self._data is None:
            self._data = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.num_tokens,))
        return self._data

    def __getstate__(self):
        return {**self.__dict__, "_data": None}

    def start(self, index: int) -> int:
        if self.seed is None:
            return index * self.seq_len
        draw, part = divmod(index, self.windows_per_draw)
        span = self.seq_len * self.windows_per_draw
        return (int(np.random.default_rng([self.seed, draw]).integers(0, self.num_tokens - span))
                + part * self.seq_len)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        s = self.start(index)
        w = torch.from_numpy(self.data[s:s + self.seq_len + 1].astype(np.int64))
        return {"input_ids": w[:-1], "labels": w[1:]}


# ----------------------------------------------------------------------------- the DataModules
def _plain(data_files: Any) -> Any:
    """data_files as str / list / dict of those (e.g. from omegaconf containers)."""
    if data_files is None or isinstance(data_files, (str, Path)):
        return data_files
    if hasattr(data_files, "items"):
        return {k: _plain(v) for k, v in data_files.items()}
    return [str(v) for v in data_files]


class TextDataModule(L.LightningDataModule):
    """What the LM and MLM DataModules share: a text source, a tokenizer, token files cached in
    ``<cache_dir>/<kind>/<name>-<tokenizer>-<hash>/`` (``meta.json`` written last marks them complete),
    and loaders (train: `ResumableDataLoader` over an `EpochSampler`; eval: in order).
    Subclasses implement `_tokenizer_identity`, `_build_tokenizer`, `_write`, `_load`, `_collate`."""

    kind = "lm"
    shuffle_train = False

    def __init__(self, source: str, data_files: Any, text_field: str, dataset_config: str | None, tokenizer: str,
                 vocab_size: int, tokenizer_file: str | None, seq_len: int, batch_size: int,
                 eval_batch_size: int | None, num_workers: int, pin_memory: bool, cache_dir: str, num_proc: int,
                 seed: int, val_fraction: float, test_fraction: float, split_seed: int):
        super().__init__()
        check_loader_config(batch_size, eval_batch_size, num_workers)
        check_int("data.seq_len", seq_len)
        check_choice("data.tokenizer", tokenizer, TOKENIZER_KINDS)
        if tokenizer in ("bpe", "wordpiece"):  # trained here, to vocab_size tokens
            check_int("data.vocab_size", vocab_size, low=MIN_BPE_VOCAB if tokenizer == "bpe" else 1)
        for key, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            check_float(f"data.{key}", value, 0.0, 1.0, high_open=True)
        self.source, self.data_files, self.text_field = source, _plain(data_files), text_field
        self.dataset_config, self.tokenizer_kind = dataset_config, tokenizer
        self.requested_vocab_size, self.tokenizer_file = vocab_size, tokenizer_file
        self.seq_len, self.batch_size, self.eval_batch_size = seq_len, batch_size, eval_batch_size or batch_size
        self.num_workers, self.pin_memory, self.num_proc = num_workers, pin_memory, num_proc
        self.cache_dir, self.seed, self.split_seed = Path(cache_dir), seed, split_seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self._src = source_identity(source, self.data_files, text_field, dataset_config, val_fraction,
                                    test_fraction, split_seed, cache_dir)
        self.vocab_size: int | None = None
        self.cache_hit: bool | None = None  # after prepare_data/setup: whether the cache was reused
        self.datasets: dict[str, Dataset] = {}

    @property
    def data_dir(self) -> Path:
        name = self.source.replace("/", "_") if self.source not in FILE_FORMATS else f"files-{self.source}"
        key = digest({"src": self._src, "tok": self._tokenizer_identity(), "format": 1})
        return self.cache_dir / self.kind / f"{name}-{self.tokenizer_kind}-{key}"

    def _tokenizer_cache_name(self) -> str:
        return f"{self.source.replace('/', '_')}-{digest(self._src)}"

    def _map(self, ds, fn, split: str, out: Path, **types: str):
        """``ds.map(fn)`` in batches, its Arrow output (columns ``types``: name -> integer type) kept in
        ``out/.tmp`` (deleted once the token files are written) rather than the datasets cache."""
        import datasets

        features = datasets.Features({k: datasets.Sequence(datasets.Value(t)) for k, t in types.items()})
        (out / ".tmp").mkdir(parents=True, exist_ok=True)
        return ds.map(fn, batched=True, num_proc=self.num_proc if self.num_proc > 1 else None, features=features,
                      remove_columns=["text"], desc=f"tokenizing {split}", load_from_cache_file=False,
                      cache_file_name=str(out / ".tmp" / f"{split}.arrow"))

    def prepare_data(self) -> Path:
        """Tokenize once (Lightning calls this on one process per machine); later runs reuse the files."""
        out = self.data_dir
        if (out / "meta.json").exists():
            if self.cache_hit is not None:  # checked (or written) earlier in this process
                return out
            problem = self._cache_problem(out)
            if problem is None:
                self.cache_hit = True
                info(f"reusing tokenized {self.source} ({self.kind}) in {out}")
                return out
            info(f"not reusing the token cache in {out}: {problem}; rebuilding it")
            shutil.rmtree(out)
        self.cache_hit = False
        info(f"preparing {self.source} ({self.kind}): loading text")
        splits = load_text_splits(self.source, self.cache_dir, self.data_files, self.text_field,
                                  self.dataset_config, self.val_fraction, self.test_fraction, self.split_seed)
        info(f"building tokenizer {self.tokenizer_kind}")
        tok = self._build_tokenizer(splits)
        out.mkdir(parents=True, exist_ok=True)
        tok.save(str(out / "tokenizer.json"))
        vocab = tok.get_vocab_size()
        meta = {"source": self._src, "tokenizer": self._tokenizer_identity(), "vocab_size": vocab,
                "dtype": token_dtype(vocab).name, "num_documents": {s: len(splits[s]) for s in SPLITS}}
        meta.update(self._write(out, splits, tok, token_dtype(vocab)))
        shutil.rmtree(out / ".tmp", ignore_errors=True)
        (out / "meta.json").write_text(json.dumps(meta, indent=2))  # written last: marks the cache complete
        return out

    @staticmethod
    def _cache_problem(out: Path) -> str | None:
        """Why the token cache in ``out`` cannot be trusted, or None: meta.json and tokenizer.json
        must parse, each split's token file must hold the number of ids meta.json records, and a
        sample of those ids must lie inside the vocabulary."""
        try:
            meta = json.loads((out / "meta.json").read_text())
            dtype, vocab = np.dtype(meta["dtype"]), int(meta["vocab_size"])
            counts = {split: int(meta["num_tokens"][split]) for split in SPLITS}
            json.loads((out / "tokenizer.json").read_text())
        except (OSError, ValueError, KeyError, TypeError) as err:
            return f"{type(err).__name__}: {err}"
        for split, n in counts.items():
            path = out / f"{split}.bin"
            size = max(n, 1) * dtype.itemsize
            if not path.is_file() or path.stat().st_size != size:
                return f"{path.name} is not the {size} bytes meta.json records"
            ids = np.memmap(path, dtype=dtype, mode="r")[:n]
            if n and int(ids[::max(1, n // 65536)].max()) >= vocab:
                return f"{path.name} holds ids outside the vocabulary ({vocab})"
        return None

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        out = self.prepare_data()
        meta = json.loads((out / "meta.json").read_text())
        self.vocab_size = meta["vocab_size"]
        self._load(out, meta)

    def spec(self) -> DataSpec:
        """The data -> model contract (after ``setup``): vocabulary and sequence length."""
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len)

    def tokenizer(self):
        """The tokenizer the cached token files were written with (e.g. to decode samples)."""
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(self.data_dir / "tokenizer.json"))

    def _loader(self, split: str) -> DataLoader:
        if not self.datasets:
            self.setup()
        ds = self.datasets[split]
        kw = dict(num_workers=self.num_workers, pin_memory=self.pin_memory,
                  persistent_workers=self.num_workers > 0, collate_fn=self._collate(split))
        if split == "train":
            return train_loader(ds, self.batch_size, self.seed, shuffle=self.shuffle_train,
                                global_ids=True, drop_last=True, **kw)
        return DataLoader(ds, batch_size=self.eval_batch_size, shuffle=False, **kw)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def _collate(self, split: str):
        return None  # torch's default collate


class LMDataModule(TextDataModule):
    """Causal-LM batches ``{"input_ids": (B, seq_len) int64, "labels": (B, seq_len) int64}``.

    See the module docstring for sources, caching, windows and exact resume. After ``setup``:
    ``vocab_size`` (the tokenizer's), ``seq_len``, ``eot_id``, ``num_tokens`` ({split: count}).
    ``tokenizer``: bpe (trained, ``vocab_size``), gpt2 (``vocab_file``/``merges_file`` or fetched), file
    (``tokenizer_file``); see `fa_train.data.tokenizer`.
    """

    kind = "lm"

    def __init__(self, source: str = "python-docs", data_files: Any = None, text_field: str = "text",
                 dataset_config: str | None = None, tokenizer: str = "bpe", vocab_size: int = 8192,
                 tokenizer_file: str | None = None, vocab_file: str | None = None, merges_file: str | None = None,
                 seq_len: int = 256, batch_size: int = 16, eval_batch_size: int | None = None,
                 num_workers: int = 0, pin_memory: bool = False, cache_dir: str = "data_cache", num_proc: int = 1,
                 seed: int = 1234, val_fraction: float = 0.0005, test_fraction: float = 0.0005,
                 split_seed: int = 0, train_samples_per_epoch: int | None = None, windows_per_draw: int = 1):
        check_int("data.seq_len", seq_len, 1, 65536)
        check_int("data.windows_per_draw", windows_per_draw, 1, 65536)
        if train_samples_per_epoch is not None:
            check_int("data.train_samples_per_epoch", train_samples_per_epoch)
        if batch_size % windows_per_draw:
            raise UserError(f"data.windows_per_draw must divide data.batch_size ({batch_size}) so that "
                            f"every batch holds whole draws, got {windows_per_draw}")
        self.vocab_file, self.merges_file = vocab_file, merges_file
        super().__init__(source, data_files, text_field, dataset_config, tokenizer, vocab_size, tokenizer_file,
                         seq_len, batch_size, eval_batch_size, num_workers, pin_memory, cache_dir, num_proc, seed,
                         val_fraction, test_fraction, split_seed)
        self.train_samples_per_epoch, self.windows_per_draw = train_samples_per_epoch, windows_per_draw
        self.eot_id: int | None = None
        self.num_tokens: dict[str, int] = {}

    def _tokenizer_identity(self) -> dict:
        files = {k: _files_identity(v) for k, v in (("tokenizer_file", self.tokenizer_file),
                 ("vocab_file", self.vocab_file), ("merges_file", self.merges_file)) if v}
        trained = self.tokenizer_kind in ("bpe", "wordpiece") and not self.tokenizer_file
        return {"kind": self.tokenizer_kind, "vocab_size": self.requested_vocab_size if trained else None, **files}

    def _build_tokenizer(self, splits):
        return build_tokenizer(self.tokenizer_kind, vocab_size=self.requested_vocab_size,
                               tokenizer_file=self.tokenizer_file, vocab_file=self.vocab_file,
                               merges_file=self.merges_file, texts=lambda: iter_texts(splits["train"]),
                               cache_dir=self.cache_dir, cache_name=self._tokenizer_cache_name())

    def _write(self, out: Path, splits, tok, dtype: np.dtype) -> dict:
        eot = tok.token_to_id(EOT)
        if eot is None:
            raise UserError(f"tokenizer {self.tokenizer_kind!r} has no {EOT} token to join documents with")

        def encode(batch: dict[str, list]) -> dict[str, list]:
            return {"ids": [e.ids + [eot] for e in tok.encode_batch(batch["text"], add_special_tokens=False)]}

        counts = {}
        for split in SPLITS:
            ds = self._map(splits[split], encode, split, out, ids=dtype.name)
            counts[split] = write_memmap(ds, "ids", out / f"{split}.bin", dtype)
            info(f"{split}: {len(ds)} documents, {counts[split]:,} tokens -> {out / f'{split}.bin'}")
        return {"eot_id": eot, "num_tokens": counts}

    def spec(self) -> DataSpec:
        """Vocabulary, sequence length and the end-of-document token (after ``setup``)."""
        return dataclasses.replace(super().spec(), eot_id=self.eot_id)

    def _load(self, out: Path, meta: dict) -> None:
        self.eot_id, self.num_tokens = meta["eot_id"], meta["num_tokens"]
        for split in SPLITS:
            train = split == "train"
            self.datasets[split] = TokenWindows(out / f"{split}.bin", meta["dtype"], self.num_tokens[split],
                                                self.seq_len, seed=self.seed if train else None,
                                                num_samples=self.train_samples_per_epoch if train else None,
                                                windows_per_draw=self.windows_per_draw if train else 1)
