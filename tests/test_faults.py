"""Faults from outside: a full disk under the output folder, a damaged token cache."""
import builtins
import errno
import hashlib
import io
import json
import sys
from pathlib import Path

import datasets  # noqa: F401 - imported here, their log handlers write to the session's
import lightning  # noqa: F401 - stderr, not to the stderr one test captures and closes
import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra

from fa_train.data.lm import LMDataModule
from fa_train.train import main

from .test_bad_input import CPU, TINY, earlier_run  # noqa: F401 - a fixture


class _FullDiskFile:
    """A file opened for writing on a full disk: opening works, writing raises ENOSPC."""

    def __init__(self, real, path):
        self._real, self._path = real, path

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", self._path)

    def writelines(self, lines):
        self.write("")

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


@pytest.fixture
def full_disk(monkeypatch):
    """Make every write under the returned folder fail with ENOSPC (other paths are untouched)."""
    real_open = builtins.open
    roots = []

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        full = isinstance(file, (str, Path)) and any(Path(file).resolve().is_relative_to(r)
                                                     for r in roots)
        return _FullDiskFile(f, str(file)) if full and any(c in mode for c in "wax+") else f

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    return roots


def test_full_disk_under_outputs_fails_in_one_line_and_spares_earlier_runs(
        monkeypatch, capsys, earlier_run, full_disk):  # noqa: F811
    log_dir, unchanged = earlier_run
    new_runs = log_dir / "full"
    full_disk.append(new_runs.resolve())
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["fa-train", f"paths.log_dir={log_dir}",
                                      f"hydra.run.dir={new_runs}/run", *CPU, *TINY])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main()
    GlobalHydra.instance().clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2, err
    assert err[-1].startswith(f"fa-train: error: no space left on device writing {new_runs}/run/")
    assert not any("Traceback" in line for line in err)
    assert not list(new_runs.rglob("*.tmp")) and not list(new_runs.rglob("*.partial*"))
    unchanged()


# ------------------------------------------------------------------------------ token cache
def _text_dm(tmp_path):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        rng = np.random.default_rng(0)
        words = ["alpha", "beta", "gamma", "delta", "kernel", "tile", "softmax", "block"]
        corpus.write_text("\n".join(" ".join(rng.choice(words, 12)) for _ in range(400)) + "\n")
    return LMDataModule(source="text", data_files=str(corpus), tokenizer="bpe", vocab_size=300,
                        seq_len=16, batch_size=4, cache_dir=str(tmp_path / "cache"),
                        val_fraction=0.05, test_fraction=0.05)


def _digests(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.bin"))}


def _truncate(out):
    path = out / "train.bin"
    path.write_bytes(path.read_bytes()[:-6])


def _garbage_ids(out):
    path = out / "train.bin"
    path.write_bytes(b"\xff" * path.stat().st_size)


CORRUPTIONS = {
    "meta-not-json": lambda out: (out / "meta.json").write_text('{"vocab_size": 3'),
    "meta-missing-key": lambda out: (out / "meta.json").write_text(json.dumps({"dtype": "uint16"})),
    "token-file-missing": lambda out: (out / "validation.bin").unlink(),
    "token-file-truncated": _truncate,
    "ids-outside-vocabulary": _garbage_ids,
    "tokenizer-not-json": lambda out: (out / "tokenizer.json").write_text("\x00\x01"),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_damaged_token_cache_is_rebuilt_not_trusted(tmp_path, capsys, corrupt):
    first = _text_dm(tmp_path)
    first.setup()
    assert first.cache_hit is False
    out, good = first.data_dir, _digests(first.data_dir)
    reused = _text_dm(tmp_path)
    reused.setup()
    assert reused.cache_hit is True  # an intact cache is reused
    corrupt(out)
    capsys.readouterr()
    again = _text_dm(tmp_path)
    again.setup()
    assert again.cache_hit is False
    assert f"not reusing the token cache in {out}" in capsys.readouterr().out
    assert _digests(out) == good  # rebuilt to the same tokens
    assert len(again.datasets["train"]) == len(first.datasets["train"])
