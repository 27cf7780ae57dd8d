"""The ``large`` corpus preset: >= 30M GPT-2 tokens of English technical prose from documentation that
ships in Debian/Ubuntu packages and PyPI sdists (`LARGE_SOURCES`: the Linux kernel's Documentation/,
Perl's pods, the Python, PostgreSQL, Django, SQLAlchemy, pandas, SciPy, scikit-learn, Astropy,
statsmodels, Dask, Celery, pytest, Flask, SymPy, Sphinx, Node.js, Git, Rust, Erlang/OTP, GHC, Apache
httpd and Octave manuals, the GIMP user manual, the Debian Administrator's Handbook).

Each source's files (less HTML pages that declare a language other than English) are converted to text
by the rules of their markup (`fa_train.data.corpus_markup`: reST, POD or HTML), normalized, stripped
of lines that repeat across >= 30% of that source's documents (navigation, footers), and kept when at
least `MIN_CHARS` long. Exact duplicates are dropped across sources; documents are split by a hash of
their path (98/1/1). The manifest records, per source, the package and version used, its licence and
counts. Needs apt (``apt-get download``) and PyPI (``pip download``) once; the result travels as a
pack (`fa_train.data.corpus_tokens`).
"""
from __future__ import annotations

import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

from fa_train.data import corpus_fetch as fetch
from fa_train.data.corpus import APT_DOCS, Document, corpus_ready, write_corpus
from fa_train.data.corpus_markup import (clean_text, drop_boilerplate, html_language, html_to_text, pod_to_text,
                                         rst_to_text)

VERSION = 3  # of the extraction rules; part of the cache key
FRACTIONS = (0.98, 0.01, 0.01)
MIN_CHARS = 500
MARKUP = {"rst": rst_to_text, "pod": pod_to_text, "html": html_to_text}


@dataclass(frozen=True)
class Source:
    """One package's documentation. ``package``: a regex of apt package names (the newest match is
    used) or ``pypi:Name==Version``; ``include``/``exclude``: regexes on paths inside the package (or
    inside the tarball matching ``inner``, for packages that ship one)."""
    name: str
    package: str
    include: str
    markup: str
    licence: str
    exclude: str = ""
    inner: str = ""


_SPHINX = r"usr/share/doc/{pkg}/html/_sources/.+\.txt"


def _sphinx_html(name: str, package: str, licence: str) -> Source:
    """A Sphinx-built HTML manual of a Debian ``python-*-doc`` package, without its generated indexes and
    its highlighted source pages."""
    return Source(name, package, rf"usr/share/doc/{package}/html/.+\.html", "html", licence,
                  exclude=r".*/_(modules|sources|static|images|downloads)/.*|.*/(genindex|search|py-modindex)\.html")


LARGE_SOURCES = (
    Source("linux-docs", r"linux-source-\d+\.\d+", r"linux-source-[\d.]+/Documentation/.+\.(rst|txt)", "rst",
           "GPL-2.0-only", exclude=r".*/Documentation/(translations|devicetree/bindings|ABI|output|sphinx)/.*",
           inner=r"usr/src/linux-source-[\d.]+\.tar\.(xz|bz2|gz)"),
    Source("perl-docs", r"perl-doc", r"usr/share/perl/[\d.]+/pod/.+\.pod", "pod",
           "Artistic-1.0-Perl OR GPL-1.0-or-later", exclude=r".*/(perltoc|perluniprops)\.pod"),
    Source("python-docs", APT_DOCS, r"usr/share/doc/python3\.\d+/html/_sources/.+\.rst\.txt", "rst", "PSF-2.0"),
    Source("postgresql-docs", r"postgresql-doc-\d+", r"usr/share/doc/postgresql-doc-\d+/html/.+\.html", "html",
           "PostgreSQL", exclude=r".*/(bookindex|index)\.html"),
    Source("django-docs", "pypi:Django==4.2.16", r"docs/.+\.txt", "rst", "BSD-3-Clause"),
    _sphinx_html("sqlalchemy-docs", "python-sqlalchemy-doc", "MIT"),
    Source("pandas-docs", r"python-pandas-doc", _SPHINX.format(pkg="python-pandas-doc"), "rst", "BSD-3-Clause"),
    _sphinx_html("scipy-docs", "python-scipy-doc", "BSD-3-Clause"),
    _sphinx_html("sklearn-docs", "python-sklearn-doc", "BSD-3-Clause"),
    _sphinx_html("astropy-docs", "python-astropy-doc", "BSD-3-Clause"),
    _sphinx_html("statsmodels-docs", "python-statsmodels-doc", "BSD-3-Clause"),
    _sphinx_html("dask-docs", "python-dask-doc", "BSD-3-Clause"),
    _sphinx_html("celery-docs", "python-celery-doc", "BSD-3-Clause"),
    _sphinx_html("pytest-docs", "python-pytest-doc", "MIT"),
    _sphinx_html("flask-docs", "python-flask-doc", "BSD-3-Clause"),
    Source("sympy-docs", r"python-sympy-doc", _SPHINX.format(pkg="python-sympy-doc"), "rst", "BSD-3-Clause"),
    Source("sphinx-docs", r"sphinx-doc", _SPHINX.format(pkg="sphinx-doc"), "rst", "BSD-2-Clause"),
    Source("nodejs-docs", r"nodejs-doc", r"usr/share/doc/nodejs/api/.+\.html", "html", "MIT",
           exclude=r".*/(all|index)\.html"),
    Source("git-docs", r"git-doc", r"usr/share/doc/git-doc/.+\.html", "html", "GPL-2.0-only",
           exclude=r".*/(index|git-index)\.html"),
    Source("rust-books", r"rust-doc", r"usr/share/doc/rust-doc/html/(book|reference|nomicon|rustc|edition-guide|"
           r"embedded-book|rust-by-example|unstable-book|rustdoc)/.+\.html", "html", "MIT OR Apache-2.0",
           exclude=r".*/(print|toc|404|index)\.html"),
    Source("gimp-help", r"gimp-help-en", r"usr/share/gimp/2\.0/help/en/.+\.html", "html", "GFDL-1.2-or-later"),
    Source("perl-module-docs", r"perl-modules-5\.\d+", r"usr/share/perl/[\d.]+/.+\.(pm|pod)", "pod",
           "Artistic-1.0-Perl OR GPL-1.0-or-later"),
    Source("erlang-docs", r"erlang-doc", r"usr/share/doc/erlang-doc/.+\.html", "html", "Apache-2.0",
           exclude=r".*/(java|src)/.*|.*/(index|release_notes|notes)\.html"),
    Source("ghc-users-guide", r"ghc-doc", r"usr/share/doc/ghc-doc/html/users_guide/.+\.html", "html",
           "BSD-3-Clause", exclude=r".*/(genindex|search|index)\.html"),
    Source("apache-httpd-docs", r"apache2-doc", r"usr/share/doc/apache2-doc/manual/en/.+\.html", "html",
           "Apache-2.0", exclude=r".*/(index|sitemap|quickreference)\.html"),
    Source("debian-handbook", r"debian-handbook", r"usr/share/doc/debian-handbook/html/en-US/.+\.html", "html",
           "GPL-2.0-or-later OR CC-BY-SA-3.0", exclude=r".*/index\.html"),
    Source("octave-docs", r"octave-doc", r"usr/share/doc/octave/octave\.html/.+\.html", "html",
           "GPL-3.0-or-later",
           exclude=r".*/(index|Concept-Index|Function-Index|Operator-Index|Graphics-Properties-Index)\.html"),
)


def large_params(sources: Iterable[Source] | None = None, fractions=None, min_chars: int | None = None) -> dict:
    """The build parameters of the large corpus (its cache key): rules version, fractions, sources
    (default: `LARGE_SOURCES`, `FRACTIONS`, `MIN_CHARS`)."""
    return {"preset": "large", "version": VERSION, "fractions": list(fractions or FRACTIONS),
            "min_chars": MIN_CHARS if min_chars is None else min_chars,
            "sources": [asdict(s) for s in (LARGE_SOURCES if sources is None else sources)]}


def package_files(src: Source, downloads: Path) -> tuple[Iterator[tuple[str, bytes]], dict]:
    """The selected (path, bytes) of ``src``'s package (downloaded once into ``downloads``) and
    {"package", "version"} of what was used."""
    include, exclude = re.compile(src.include), re.compile(src.exclude) if src.exclude else None
    select = lambda p: bool(include.fullmatch(p)) and not (exclude and exclude.fullmatch(p))  # noqa: E731
    if src.package.startswith("pypi:"):
        spec = src.package.removeprefix("pypi:")
        return fetch.sdist_files(fetch.download_sdist(spec, downloads), select), {"package": spec, "version": ""}
    names = fetch.apt_packages(src.package)
    if not names:
        raise RuntimeError(f"apt offers no package matching {src.package!r} (source {src.name})")
    deb = fetch.download_deb(names[-1], downloads)
    files = fetch.deb_files(deb, select if not src.inner else (lambda p: False), src.inner or None,
                            select if src.inner else None)
    return files, {"package": names[-1], "version": fetch.apt_version(names[-1])}


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
                  min_chars: int | None = None, workers: int = 1) -> dict[str, Path]:
    """{split: jsonl path} of the large corpus under ``<cache_dir>/corpus/large`` (built once per
    parameters, reading ``workers`` sources at a time; the package archives stay in
    ``<cache_dir>/downloads/large``)."""
    from fa_train.data.lm import info

    sources = LARGE_SOURCES if sources is None else sources
    fractions, min_chars = fractions or FRACTIONS, MIN_CHARS if min_chars is None else min_chars
    out, params = Path(cache_dir) / "corpus" / "large", large_params(sources, fractions, min_chars)
    if (paths := corpus_ready(out, params)) is not None:
        return paths
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
