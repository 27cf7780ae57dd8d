"""Fixtures for the LM/MLM/corpus tests: a tiny fake reST ``_sources`` tree and its JSONL corpus."""
from __future__ import annotations

import random

import pytest

WORDS = ("the a function returns value module object list string python class method file data "
         "type error call name number with from into each when this that other new test").split()


def fake_document(rng: random.Random, n_paragraphs: int) -> str:
    paras = []
    for _ in range(n_paragraphs):
        sents = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "."
                 for _ in range(rng.randint(1, 4))]
        paras.append(" ".join(sents))
    return "Title\n=====\n\n" + "\n\n".join(paras) + "\n"


def make_sources(root, n_docs: int = 40, seed: int = 0):
    """A fake ``usr/share/doc/python3.11/html/_sources`` tree of ``*.rst.txt`` files."""
    rng = random.Random(seed)
    for i in range(n_docs):
        path = root / ("library" if i % 2 else "tutorial") / f"doc{i:03d}.rst.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fake_document(rng, rng.randint(3, 12)))
    (root / "not-a-source.txt").write_text("ignored")
    return root


FRACTIONS = (0.6, 0.2, 0.2)  # the tiny corpus needs larger held-out fractions than the real one


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """{split: jsonl path} of a 40-document fake corpus (built with the real corpus builder)."""
    from fa_train.data.corpus import build_corpus

    root = tmp_path_factory.mktemp("corpus")
    return build_corpus(make_sources(root / "_sources"), root / "out", fractions=FRACTIONS)


@pytest.fixture
def fake_python_docs(monkeypatch, tmp_path_factory):
    """Make source="python-docs" use a fake _sources tree instead of apt-get (offline tests)."""
    import fa_train.data.corpus as corpus

    src = make_sources(tmp_path_factory.mktemp("pydocs") / "_sources")
    monkeypatch.setattr(corpus, "default_origin", lambda cache_dir: corpus.DocsOrigin("python3.11-doc", "apt"))
    monkeypatch.setattr(corpus, "fetch_python_docs", lambda cache_dir, origin: src)
    monkeypatch.setattr(corpus, "FRACTIONS", FRACTIONS)
    return src
