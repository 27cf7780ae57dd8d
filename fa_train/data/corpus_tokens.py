"""A tokenized corpus: its statistics (tokens per source, document lengths) and its pack, the compressed
copy of the token memmaps that carries it to a machine without registry access.

`token_stats` reads the document boundaries (end-of-text tokens) of the memmaps that
`fa_train.data.lm.LMDataModule` wrote, pairing each document with the JSONL line it came from.

A pack is a folder: ``<split>.bin.xz`` (the uint16/uint32 memmaps, xz-compressed), the LM cache's
``meta.json`` and ``tokenizer.json.xz``, the corpus ``manifest.json``, and ``pack.json`` (the name of the
LM cache folder and the size and SHA-256 of every unpacked file). `unpack` restores the folder under
``<cache_dir>/lm/`` and checks every file before the LM cache counts as complete (``meta.json`` last).
`restore_text` writes the corpus JSONL back from the tokens, so that a machine holding only the pack
can prepare other tokenizations of the same documents (BERT's WordPiece for masked-LM training).
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
from pathlib import Path

import numpy as np

from fa_train.data.corpus import file_sha256

SPLITS = ("train", "validation", "test")
LENGTH_THRESHOLDS = (1024, 2048, 4096, 8192, 16384)
PERCENTILES = (10, 25, 50, 75, 90, 99)


def document_lengths(tokens: np.ndarray, eot_id: int) -> np.ndarray:
    """Token counts of the documents of a stream where each document ends with ``eot_id`` (not counted)."""
    ends = np.flatnonzero(tokens == eot_id)
    return np.diff(np.concatenate([[-1], ends])) - 1


def length_summary(lengths: np.ndarray) -> dict:
    """Count, total, mean, percentiles and max of document lengths, and for each threshold the share of
    documents and of tokens in documents at least that long."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    out = {"documents": int(len(lengths)), "tokens": total,
           "mean": round(float(lengths.mean()), 1) if len(lengths) else 0.0,
           "max": int(lengths.max()) if len(lengths) else 0,
           "percentiles": {f"p{p}": int(np.percentile(lengths, p)) for p in PERCENTILES} if len(lengths) else {}}
    out["at_least"] = {str(t): {"documents": int((lengths >= t).sum()),
                                "token_share": round(float(lengths[lengths >= t].sum()) / max(total, 1), 4)}
                       for t in LENGTH_THRESHOLDS}
    return out


def token_stats(corpus_files: dict[str, Path], lm_dir: Path) -> dict:
    """Tokens per split and per source and the document-length distribution of a tokenized corpus
    (``corpus_files``: {split: jsonl}; ``lm_dir``: the LM cache folder with ``<split>.bin`` and meta.json)."""
    meta = json.loads((lm_dir / "meta.json").read_text())
    per_source: dict[str, list[int]] = {}
    splits, everything = {}, []
    for split in SPLITS:
        tokens = np.memmap(lm_dir / f"{split}.bin", dtype=meta["dtype"], mode="r",
                           shape=(meta["num_tokens"][split],))
        lengths = document_lengths(tokens, meta["eot_id"])
        with open(corpus_files[split], encoding="utf-8") as f:
            sources = [json.loads(line).get("source", "?") for line in f]
        if len(sources) != len(lengths):
            raise ValueError(f"{split}: {len(sources)} documents in {corpus_files[split].name} but {len(lengths)} "
                             f"in {split}.bin; the token cache does not belong to this corpus")
        for source, n in zip(sources, lengths.tolist()):
            per_source.setdefault(source, []).append(n)
        splits[split] = {"documents": len(lengths), "tokens": int(lengths.sum())}
        everything.append(lengths)
    return {"tokenizer": meta["tokenizer"], "vocab_size": meta["vocab_size"], "splits": splits,
            "sources": {s: {"documents": len(v), "tokens": int(sum(v))} for s, v in sorted(per_source.items())},
            "document_length": length_summary(np.concatenate(everything))}


ARRAY_SUFFIXES = (".bin", ".npy")   # a tokenized cache's arrays
COMPRESSED = (*ARRAY_SUFFIXES, "tokenizer.json")   # what a pack compresses (the tokenizer: 3.5 MB to 0.5)


def data_files(lm_dir: Path) -> list[Path]:
    """The arrays of a tokenized cache folder (ARRAY_SUFFIXES)."""
    return sorted(p for p in Path(lm_dir).iterdir() if p.suffix in ARRAY_SUFFIXES)


def pack(lm_dir: Path, manifest: Path, out: Path, preset: int = 6) -> dict:
    """Write the pack of ``lm_dir`` (+ the corpus ``manifest``) into ``out``; returns pack.json's content."""
    lm_dir, out = Path(lm_dir), Path(out)
    meta = json.loads((lm_dir / "meta.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    # the token memmaps (and the MLM cache's segment tables), the tokenizer, the two manifests
    sources = {**{p.name: p for p in data_files(lm_dir)}, "tokenizer.json": lm_dir / "tokenizer.json",
               "meta.json": lm_dir / "meta.json", "manifest.json": Path(manifest)}
    for name, src in sources.items():
        if name.endswith(COMPRESSED):
            tmp = out / f"{name}.xz.tmp"
            with open(src, "rb") as f, lzma.open(tmp, "wb", preset=preset) as z:
                shutil.copyfileobj(f, z, 1 << 22)
            os.replace(tmp, out / f"{name}.xz")
            (out / name).unlink(missing_ok=True)   # a plain copy left by an older pack
        else:
            shutil.copyfile(src, out / name)
        files[name] = {"bytes": src.stat().st_size, "sha256": file_sha256(src)}
    info = {"lm_dir": lm_dir.name, "kind": lm_dir.parent.name, "num_tokens": meta["num_tokens"], "files": files}
    (out / "pack.json").write_text(json.dumps(info, indent=2))
    return info


def unpack(pack_dir: Path, cache_dir: Path) -> Path:
    """Restore a pack into ``<cache_dir>/<kind>/<lm_dir>`` (checked, meta.json last); returns that folder.
    A complete, matching folder already there is kept."""
    pack_dir = Path(pack_dir)
    try:
        info = json.loads((pack_dir / "pack.json").read_text())
        files = info["files"]
        dest = Path(cache_dir) / info["kind"] / info["lm_dir"]
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"--from-pack {pack_dir}: not a corpus pack ({type(err).__name__}: {err})") from None

    def intact(path: Path, name: str) -> bool:
        rec = files[name]
        return path.is_file() and path.stat().st_size == rec["bytes"] and file_sha256(path) == rec["sha256"]

    if all(intact(dest / name, name) for name in files):
        return dest
    tmp = dest.with_name(dest.name + ".unpack")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in files:   # each file compressed or not (packs made before kept the tokenizer plain)
        src = pack_dir / (name + ".xz") if (pack_dir / (name + ".xz")).is_file() else pack_dir / name
        try:
            with (lzma.open(src, "rb") if src.suffix == ".xz" else open(src, "rb")) as f, open(tmp / name, "wb") as g:
                shutil.copyfileobj(f, g, 1 << 22)
        except (OSError, lzma.LZMAError, EOFError) as err:
            shutil.rmtree(tmp)
            raise ValueError(f"--from-pack {pack_dir}: cannot read {src.name} ({err}); the pack is corrupt") from None
        if not intact(tmp / name, name):
            shutil.rmtree(tmp)
            raise ValueError(f"--from-pack {pack_dir}: {name} does not match its checksum; the pack is corrupt")
    shutil.rmtree(dest, ignore_errors=True)
    held = dest.with_name(dest.name + ".meta.json")  # the folder counts as complete once meta.json is back
    os.replace(tmp / "meta.json", held)
    os.replace(tmp, dest)
    os.replace(held, dest / "meta.json")
    return dest


def restore_text(lm_dir: Path, corpus_dir: Path, batch: int = 1024) -> dict[str, Path]:
    """Write ``<corpus_dir>/<split>.jsonl`` (one document a line, decoded from the tokens of ``lm_dir``
    with its tokenizer) and the corpus manifest (the packed one, with these files' checksums; written
    last, so the corpus counts as prepared only when complete); returns {split: path}. Byte-level BPE
    (GPT-2's) decodes to the original text exactly; documents' paths and sources are not in the tokens
    and stay empty."""
    from tokenizers import Tokenizer

    lm_dir, corpus_dir = Path(lm_dir), Path(corpus_dir)
    meta = json.loads((lm_dir / "meta.json").read_text())
    manifest = json.loads((lm_dir / "manifest.json").read_text())
    tok = Tokenizer.from_file(str(lm_dir / "tokenizer.json"))
    corpus_dir.mkdir(parents=True, exist_ok=True)
    (corpus_dir / "manifest.json").unlink(missing_ok=True)
    paths, files = {}, {}
    for split in SPLITS:
        tokens = np.fromfile(lm_dir / f"{split}.bin", dtype=meta["dtype"])[:meta["num_tokens"][split]]
        ends = np.flatnonzero(tokens == meta["eot_id"])
        starts = np.concatenate([[0], ends[:-1] + 1])
        paths[split] = corpus_dir / f"{split}.jsonl"
        tmp = paths[split].with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for i in range(0, len(ends), batch):
                docs = [tokens[a:b].tolist() for a, b in zip(starts[i:i + batch], ends[i:i + batch])]
                for text in tok.decode_batch(docs, skip_special_tokens=False):
                    fh.write(json.dumps({"text": text, "path": "", "source": ""}, ensure_ascii=False) + "\n")
        os.replace(tmp, paths[split])
        files[split] = {"bytes": paths[split].stat().st_size, "sha256": file_sha256(paths[split])}
    manifest.update(files=files, restored_from_tokens=lm_dir.name)
    (corpus_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return paths
