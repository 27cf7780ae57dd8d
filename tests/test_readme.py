"""README.md: its generated table matches the result files, and every command it shows runs."""
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MODULES = {"fa-train": "fa_train.train", "fa-bench": "fa_train.bench.cli",
           "fa-repro": "fa_train.repro.cli", "fa-data": "fa_train.data.cli",
           "fa-generate": "fa_train.generate"}


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def commands():
    """The command lines of the README's bash blocks, without comments."""
    out = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def safe_form(line):
    """The command as it is checked: fa-train composes only (--cfg job); fa-repro run plans only
    (--dry-run); other fa-* subcommands print their --help; scripts are syntax-checked."""
    argv = shlex.split(line)
    tool, args = argv[0], argv[1:]
    if tool in MODULES:
        cmd = [sys.executable, "-m", MODULES[tool]]
        if tool == "fa-train":  # a multirun sweep is checked at its first value
            first = [a.split(",")[0] if "-m" in args and "=" in a and "[" not in a else a
                     for a in args if a != "-m"]
            return cmd + first + ["--cfg", "job"]
        if tool == "fa-repro" and args[:1] == ["run"]:
            return cmd + args + ["--dry-run"]
        if tool == "fa-repro" and args[:1] in (["list"], ["results"]):
            return cmd + args + (["--check"] if args == ["results"] else [])
        return cmd + args[:1] + ["--help"]
    if tool.startswith("scripts/"):
        return ["bash", "-n", str(ROOT / tool)]
    if tool == "make":
        return ["make", "-n", "-C", str(ROOT), *args]
    raise AssertionError(f"README command {line!r} has no check; add one in safe_form")


def test_readme_results_match_the_result_files():
    from fa_train.repro.results import sync
    assert sync(check=True) == [], "run `fa-repro results`"


def test_readme_quick_start_names_the_ci_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make run" in README and "make test" in README and "make test" in ci


def test_readme_is_a_reference_not_a_report():
    assert len(README.splitlines()) <= 200
    assert not re.search(r"\bround \d+", README, flags=re.I)
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", README)


def test_every_readme_command_runs():
    lines = commands()
    assert {"fa-train", "fa-bench", "fa-repro", "fa-data"} <= {shlex.split(c)[0] for c in lines}

    def run(line):
        done = subprocess.run(safe_form(line), cwd=ROOT, capture_output=True, text=True, timeout=300)
        return line, done.returncode, (done.stdout + done.stderr)[-1500:]
    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = [r for r in pool.map(run, lines) if r[1] != 0]
    assert not failed, "\n\n".join(f"{line}: exit {rc}\n{out}" for line, rc, out in failed)


@pytest.mark.parametrize("block", blocks("python"))
def test_readme_python_imports_resolve(block):
    imports = "\n".join(l for l in block.splitlines() if l.startswith(("from ", "import ")))
    exec(compile(imports, "README.md", "exec"), {})
