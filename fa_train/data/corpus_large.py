"""The ``large`` corpus preset: >= 30M GPT-2 tokens of English technical prose from documentation that
ships in Debian/Ubuntu packages and PyPI sdists (`LARGE_SOURCES`: the Linux kernel's Documentation/,
Perl's pods, the Python, PostgreSQL, Django, SQLAlchemy, pandas, SciPy, scikit-learn, Astropy,
statsmodels, Dask, Celery, pytest, Flask, SymPy, Sphinx, Node.js, Git, Rust, Erlang/OTP, GHC, Apache
httpd and Octave manuals, the GIMP user manual, the Debian Administrator's Handbook).

Each source's files (less HTML pages that declare a language other than English) are converted to text
by the rules of their markup (`fa_train.data.corpus_markup`: reST, POD or HTML), normalized, stripped
of lines that repeat across >= 30% of that source's documents (navigation, footers), and kept when at
least `MIN_CHARS` long. Exact duplicates are dropped across sources; documents are split by a hash of
their path (98/1/1). Each apt package is read at the version pinned in `LARGE_SOURCES` (the corpus
the committed results were trained on), or with ``pinned=False`` at the version apt offers now (another
corpus, under its own cache key). The manifest records, per source, the package and version used, its
licence and counts. Needs apt (``apt-get download``) and PyPI (``pip download``) once; the result
travels as a pack (`fa_train.data.corpus_tokens`).
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from fa_train.data import corpus_fetch as fetch
from fa_train.data.corpus import Document, corpus_ready, write_corpus
from fa_train.data.corpus_markup import (clean_text, drop_boilerplate, html_language, html_to_text, pod_to_text,
                                         rst_to_text)

VERSION = 3  # of the extraction rules; part of the cache key
FRACTIONS = (0.98, 0.01, 0.01)
MIN_CHARS = 500
MARKUP = {"rst": rst_to_text, "pod": pod_to_text, "html": html_to_text}


@dataclass(frozen=True)
class Source:
    """One package's documentation. ``package``: an apt package, read at ``version``, or
    ``pypi:Name==Version``; ``include``/``exclude``: regexes on paths inside the package (or inside the
    tarball matching ``inner``, for packages that ship one)."""
    name: str
    package: str
    include: str
    markup: str
    licence: str
    exclude: str = ""
    inner: str = ""
    version: str = ""

    @property
    def apt(self) -> bool:
        """Whether the package comes from apt (else from PyPI)."""
        return not self.package.startswith("pypi:")


_SPHINX = r"usr/share/doc/{pkg}/html/_sources/.+\.txt"


def _sphinx_html(name: str, package: str, licence: str, version: str) -> Source:
    """A Sphinx-built HTML manual of a Debian ``python-*-doc`` package, without its generated indexes and
    its highlighted source pages."""
    return Source(name, package, rf"usr/share/doc/{package}/html/.+\.html", "html", licence,
                  exclude=r".*/_(modules|sources|static|images|downloads)/.*|.*/(genindex|search|py-modindex)\.html",
                  version=version)


LARGE_SOURCES = (  # each apt package pinned at the version the committed results were trained on
    Source("linux-docs", "linux-source-6.1", r"linux-source-[\d.]+/Documentation/.+\.(rst|txt)", "rst",
           "GPL-2.0-only", exclude=r".*/Documentation/(translations|devicetree/bindings|ABI|output|sphinx)/.*",
           inner=r"usr/src/linux-source-[\d.]+\.tar\.(xz|bz2|gz)", version="6.1.176-1"),
    Source("perl-docs", "perl-doc", r"usr/share/perl/[\d.]+/pod/.+\.pod", "pod",
           "Artistic-1.0-Perl OR GPL-1.0-or-later", exclude=r".*/(perltoc|perluniprops)\.pod",
           version="5.36.0-7+deb12u3"),
    Source("python-docs", "python3.11-doc", r"usr/share/doc/python3\.\d+/html/_sources/.+\.rst\.txt", "rst",
           "PSF-2.0", version="3.11.2-6+deb12u8"),
    Source("postgresql-docs", "postgresql-doc-15", r"usr/share/doc/postgresql-doc-\d+/html/.+\.html", "html",
           "PostgreSQL", exclude=r".*/(bookindex|index)\.html", version="15.18-0+deb12u1"),
    Source("django-docs", "pypi:Django==4.2.16", r"docs/.+\.txt", "rst", "BSD-3-Clause"),
    _sphinx_html("sqlalchemy-docs", "python-sqlalchemy-doc", "MIT", "1.4.46+ds1-1"),
    Source("pandas-docs", "python-pandas-doc", _SPHINX.format(pkg="python-pandas-doc"), "rst", "BSD-3-Clause",
           version="1.5.3+dfsg-2"),
    _sphinx_html("scipy-docs", "python-scipy-doc", "BSD-3-Clause", "1.10.1-2"),
    _sphinx_html("sklearn-docs", "python-sklearn-doc", "BSD-3-Clause", "1.2.1+dfsg-1"),
    _sphinx_html("astropy-docs", "python-astropy-doc", "BSD-3-Clause", "5.2.1-2+deb12u1"),
    _sphinx_html("statsmodels-docs", "python-statsmodels-doc", "BSD-3-Clause", "0.13.5+dfsg-7"),
    _sphinx_html("dask-docs", "python-dask-doc", "BSD-3-Clause", "2022.12.1+dfsg-2"),
    _sphinx_html("celery-docs", "python-celery-doc", "BSD-3-Clause", "5.2.6-5"),
    _sphinx_html("pytest-docs", "python-pytest-doc", "MIT", "7.2.1-2"),
    _sphinx_html("flask-docs", "python-flask-doc", "BSD-3-Clause", "2.2.2-3"),
    Source("sympy-docs", "python-sympy-doc", _SPHINX.format(pkg="python-sympy-doc"), "rst", "BSD-3-Clause",
           version="1.11.1-1"),
    Source("sphinx-docs", "sphinx-doc", _SPHINX.format(pkg="sphinx-doc"), "rst", "BSD-2-Clause", version="5.3.0-4"),
    Source("nodejs-docs", "nodejs-doc", r"usr/share/doc/nodejs/api/.+\.html", "html", "MIT",
           exclude=r".*/(all|index)\.html", version="18.20.4+dfsg-1~deb12u2"),
    Source("git-docs", "git-doc", r"usr/share/doc/git-doc/.+\.html", "html", "GPL-2.0-only",
           exclude=r".*/(index|git-index)\.html", version="1:2.39.5-0+deb12u3"),
    Source("rust-books", "rust-doc", r"usr/share/doc/rust-doc/html/(book|reference|nomicon|rustc|edition-guide|"
           r"embedded-book|rust-by-example|unstable-book|rustdoc)/.+\.html", "html", "MIT OR Apache-2.0",
           exclude=r".*/(print|toc|404|index)\.html", version="1.63.0+dfsg1-2"),
    Source("gimp-help", "gimp-help-en", r"usr/share/gimp/2\.0/help/en/.+\.html", "html", "GFDL-1.2-or-later",
           version="2.10.34-2"),
    Source("perl-module-docs", "perl-modules-5.36", r"usr/share/perl/[\d.]+/.+\.(pm|pod)", "pod",
           "Artistic-1.0-Perl OR GPL-1.0-or-later", version="5.36.0-7+deb12u3"),
    Source("erlang-docs", "erlang-doc", r"usr/share/doc/erlang-doc/.+\.html", "html", "Apache-2.0",
           exclude=r".*/(java|src)/.*|.*/(index|release_notes|notes)\.html", version="1:25.2.3+dfsg-1+deb12u4"),
    Source("ghc-users-guide", "ghc-doc", r"usr/share/doc/ghc-doc/html/users_guide/.+\.html", "html",
           "BSD-3-Clause", exclude=r".*/(genindex|search|index)\.html", version="9.0.2-4"),
    Source("apache-httpd-docs", "apache2-doc", r"usr/share/doc/apache2-doc/manual/en/.+\.html", "html",
           "Apache-2.0", exclude=r".*/(index|sitemap|quickreference)\.html", version="2.4.68-1~deb12u1"),
    Source("debian-handbook", "debian-handbook", r"usr/share/doc/debian-handbook/html/en-US/.+\.html", "html",
           "GPL-2.0-or-later OR CC-BY-SA-3.0", exclude=r".*/index\.html", version="11.20220922"),
    Source("octave-docs", "octave-doc", r"usr/share/doc/octave/octave\.html/.+\.html", "html",
           "GPL-3.0-or-later",
           exclude=r".*/(index|Concept-Index|Function-Index|Operator-Index|Graphics-Properties-Index)\.html",
           version="7.3.0-2"),
)


def large_params(sources: Iterable[Source] | None = None, fractions=None, min_chars: int | None = None) -> dict:
    """The build parameters of the large corpus (its cache key): rules version, fractions, sources
    (default: `LARGE_SOURCES`, `FRACTIONS`, `MIN_CHARS`)."""
    return {"preset": "large", "version": VERSION, "fractions": list(fractions or FRACTIONS),
            "min_chars": MIN_CHARS if min_chars is None else min_chars,
            "sources": [asdict(s) for s in (LARGE_SOURCES if sources is None else sources)]}


def package_files(src: Source, downloads: Path) -> tuple[Iterator[tuple[str, bytes]], dict]:
    """The selected (path, bytes) of ``src``'s package at its version (downloaded once into
    ``downloads``) and {"package", "version"} of what was used."""
    include, exclude = re.compile(src.include), re.compile(src.exclude) if src.exclude else None
    select = lambda p: bool(include.fullmatch(p)) and not (exclude and exclude.fullmatch(p))  # noqa: E731
    if not src.apt:
        spec = src.package.removeprefix("pypi:")
        return fetch.sdist_files(fetch.download_sdist(spec, downloads), select), {"package": spec, "version": ""}
    deb = fetch.download_deb(src.package, downloads, src.version)
    files = fetch.deb_files(deb, select if not src.inner else (lambda p: False), src.inner or None,
                            select if src.inner else None)
    return files, {"package": src.package, "version": src.version}


def check_offered(sources: Iterable[Source]) -> None:
    """A RuntimeError naming every apt package whose pinned version apt does not offer (package lists
    refreshed once first when running as root), with what it offers and the two ways on."""
    def missing() -> list[tuple[Source, list[str]]]:
        offered = {src: fetch.apt_versions(src.package) for src in sources if src.apt}
        return [(src, versions) for src, versions in offered.items() if src.version not in versions]

    gone = missing()
    if gone and fetch.refresh_lists():
        gone = missing()
    if gone:
        lines = "; ".join(f"{s.name}: {s.package} {s.version} (apt offers {', '.join(o) or 'none'})" for s, o in gone)
        raise RuntimeError(f"the large corpus is pinned to package versions apt no longer offers: {lines}. "
                           f"Restore a pack of the pinned corpus (fa-data corpus --preset large --from-pack DIR), "
                           f"or build another corpus from what apt offers now with --unpinned (its runs compare "
                           f"only with each other).")


def unpinned(sources: Iterable[Source]) -> tuple[Source, ...]:
    """``sources`` with each apt package at the version apt offers now."""
    out = []
    for src in sources:
        if src.apt:
            version = fetch.apt_version(src.package)
            if not version:
                raise RuntimeError(f"apt offers no {src.package} (source {src.name})")
            src = replace(src, version=version)
        out.append(src)
    return tuple(out)


def prepared_sources(cache_dir: str | Path) -> tuple[Source, ...]:
    """The sources the large corpus prepared in ``cache_dir`` was built from (its manifest's; the
    files' checksums are `corpus_ready`'s to check), else `LARGE_SOURCES`."""
    try:
        m = json.loads((Path(cache_dir) / "corpus" / "large" / "manifest.json").read_text())
        return tuple(Source(**s) for s in m["params"]["sources"])
    except (OSError, ValueError, KeyError, TypeError):
        return LARGE_SOURCES


def _english(src: Source, page: str) -> bool:
    """HTML pages that declare another language (some packages mix translations in) are left out."""
    return src.markup != "html" or html_language(page).split("-")[0] in ("", "en")


def source_documents(src: Source, files: Iterable[tuple[str, bytes]], min_chars: int = MIN_CHARS
                     ) -> tuple[list[Document], dict]:
    """``src``'s files as cleaned documents (sorted by path) and counts of what was read and dropped."""
    convert = MARKUP[src.markup]
    pages = sorted((path, data.decode("utf-8", errors="replace")) for path, data in files)
    english = [(path, page) for path, page in pages if _english(src, page)]
    raw = [(path, clean_text(convert(page))) for path, page in english]
    texts = drop_boilerplate([t for _, t in raw])
    docs = [Document(f"{src.name}/{path}", text, src.name) for (path, _), text in zip(raw, texts)
            if len(text) >= min_chars]
    return docs, {"files": len(pages), "not_english": len(pages) - len(english), "too_short": len(raw) - len(docs)}


def _read_source(job: tuple[Source, Path, int]) -> tuple[list[Document], dict]:
    src, downloads, min_chars = job
    try:
        files, used = package_files(src, downloads)
        docs, counts = source_documents(src, files, min_chars)
    except fetch.CommandError as err:
        raise RuntimeError(f"cannot fetch source {src.name} ({src.package}): {err}\nThe large corpus needs "
                           f"apt-get and pip with registry access once; elsewhere, carry its pack "
                           f"(fa-data corpus --preset large --pack DIR, then --from-pack DIR).") from None
    return docs, {**used, "licence": src.licence, "markup": src.markup, **counts}


def prepare_large(cache_dir: str | Path, sources: tuple[Source, ...] | None = None, fractions=None,
                  min_chars: int | None = None, workers: int = 1, pinned: bool = True) -> dict[str, Path]:
    """{split: jsonl path} of the large corpus under ``<cache_dir>/corpus/large`` (built once per
    parameters, reading ``workers`` sources at a time; the package archives stay in
    ``<cache_dir>/downloads/large``). ``pinned=False`` reads each apt package at the version apt
    offers now instead of the pinned one (another corpus, another cache key)."""
    from fa_train.data.lm import info

    sources = LARGE_SOURCES if sources is None else sources
    sources = sources if pinned else unpinned(sources)
    fractions, min_chars = fractions or FRACTIONS, MIN_CHARS if min_chars is None else min_chars
    out, params = Path(cache_dir) / "corpus" / "large", large_params(sources, fractions, min_chars)
    if (paths := corpus_ready(out, params)) is not None:
        return paths
    check_offered(sources)
    jobs = [(src, Path(cache_dir) / "downloads" / "large", min_chars) for src in sources]
    packages: dict[str, dict] = {}

    def documents(results) -> Iterator[Document]:
        for src, (docs, used) in zip(sources, results):
            packages[src.name] = used
            info(f"large corpus: {src.name} ({used['package']} {used['version']}): {len(docs)} documents")
            yield from docs

    if workers <= 1:
        return write_corpus(documents(map(_read_source, jobs)), out, params, fractions, extra={"packages": packages})
    with ProcessPoolExecutor(workers) as pool:
        return write_corpus(documents(pool.map(_read_source, jobs)), out, params, fractions,
                            extra={"packages": packages})
