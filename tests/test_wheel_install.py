"""A non-editable wheel works from any folder: it carries configs/ and recipes/ and writes nowhere
inside site-packages."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "fa_train", "kernels",
           "configs", "recipes")


def _run(cmd, cwd, env=None, timeout=300):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv (seeing this interpreter's packages) with the project's wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(dist), str(src)], cwd=tmp)
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp).strip())
    (site / "project_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q",
          *map(str, dist.glob("*.whl"))], cwd=tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FA_TRAIN_ROOT")}
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return venv, site, elsewhere, env


def test_wheel_imports_the_installed_copy(installed):
    venv, site, elsewhere, env = installed
    out = _run([str(venv / "bin" / "python"), "-c",
                "import fa_train.resources as r; print(r.config_dir()); print(r.recipe_dir()); "
                "print(r.project_root())"], cwd=elsewhere, env=env)
    configs, recipes, root = out.split()
    assert Path(configs) == site / "fa_train" / "configs"
    assert Path(recipes) == site / "fa_train" / "recipes"
    assert Path(root) == elsewhere.resolve()


def test_installed_fa_train_composes_the_job_config(installed):
    venv, site, elsewhere, env = installed
    out = _run([str(venv / "bin" / "fa-train"), "--cfg", "job", "experiment=default"],
               cwd=elsewhere, env=env)
    assert "experiment_name: default" in out and "_target_:" in out


def test_installed_fa_repro_lists_every_recipe(installed):
    venv, site, elsewhere, env = installed
    out = _run([str(venv / "bin" / "fa-repro"), "list"], cwd=elsewhere,
               env={**env, "COLUMNS": "200"})
    for recipe in (REPO / "recipes").glob("*.yaml"):
        assert recipe.stem in out
    assert "invalid" not in out
