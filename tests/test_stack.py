"""One tested stack: pyproject's bounds, setup_env.sh's pins and `fa-train --version` agree."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fa_train import envreport

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
SETUP_ENV = (REPO / "scripts" / "setup_env.sh").read_text()


def _requirement(name):
    return next(Requirement(r) for r in PYPROJECT["dependencies"] if Requirement(r).name == name)


@pytest.mark.parametrize("name,index", [("torch", 0), ("triton", 1)])
def test_bounds_admit_the_tested_versions_and_exclude_untested_majors(name, index):
    spec = _requirement(name).specifier
    for device, versions in envreport.TESTED_STACKS.items():
        assert spec.contains(f"{versions[index]}.0"), (name, device)
    major = int(versions[index].split(".")[0])
    assert not spec.contains(f"{major + 1}.0.0")


def test_setup_env_pins_the_tested_stacks():
    pins = dict(re.findall(r"(torch|triton)==([0-9.]+)(?:\+cpu)?", SETUP_ENV))
    cuda = re.search(r"torch_spec=\$\{TORCH_SPEC:-torch==([0-9.]+)\}", SETUP_ENV).group(1)
    cpu = re.search(r"torch_spec=\$\{TORCH_SPEC:-torch==([0-9.]+)\+cpu\}", SETUP_ENV).group(1)
    minor = lambda v: ".".join(v.split(".")[:2])  # noqa: E731
    assert (minor(cuda), minor(pins["triton"])) == envreport.TESTED_STACKS["cuda"]
    assert (minor(cpu), minor(pins["triton"])) == envreport.TESTED_STACKS["cpu"]


def test_optional_loggers_are_extras_and_the_license_is_spdx():
    names = {Requirement(r).name for r in PYPROJECT["dependencies"]}
    assert not names & {"wandb", "tensorboard"}
    assert {"wandb", "tensorboard"} <= set(PYPROJECT["optional-dependencies"])
    assert PYPROJECT["license"] == "Apache-2.0"


ENV = {"fa-train": "0.1.0", "python": "3.11.7", "torch": "2.11.0+cu128", "triton": "3.6.0",
       "cuda": "12.8", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("change,warned", [
    ({}, False),
    ({"torch": "2.13.0+cpu", "cuda": None, "device": "cpu", "gpu": None}, False),
    ({"torch": "2.14.0", "triton": "3.8.0"}, True),
    ({"triton": "3.9.0", "device": "cpu", "torch": "2.13.0+cpu"}, True),
    ({"triton": None}, True),
], ids=["gpu-tested", "cpu-tested", "gpu-newer", "cpu-triton-3.9", "no-triton"])
def test_untested_combinations_are_warned(change, warned):
    env = {**ENV, **change}
    warning = envreport.untested_warning(env)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith(f"warning: torch {env['torch']} + triton {env['triton']} on "
                                  f"{env['device']} is not a tested stack")
    report = envreport.report(env).splitlines()
    assert [line.split()[0] for line in report[:len(env)]] == list(env)


def test_fa_train_version_reports_this_environment():
    out = subprocess.run([sys.executable, "-m", "fa_train.train", "--version"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(None, 1) for line in out.stdout.splitlines() if not line.startswith("warning"))
    import torch
    assert lines["torch"] == torch.__version__ and lines["fa-train"] == "0.1.0"
    assert lines["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
