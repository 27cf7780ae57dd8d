"""Where fa-train finds its Hydra configs and recipes, and the root its runs write under.

A wheel ships both folders inside the package (``fa_train/configs``, ``fa_train/recipes``, copied
by setup.py at build time); a source checkout or an editable install uses the top-level folders.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DIR = PACKAGE_DIR.parent


def is_source_checkout() -> bool:
    """True when this package runs from the project's own source tree (not an installed copy)."""
    return (CHECKOUT_DIR / "pyproject.toml").is_file() and (CHECKOUT_DIR / "configs").is_dir()


def bundled_dir(name: str) -> Path:
    """The installed copy of the top-level folder ``name`` (configs or recipes), else the checkout's."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else CHECKOUT_DIR / name


def config_dir() -> Path:
    return bundled_dir("configs")


def recipe_dir() -> Path:
    return bundled_dir("recipes")


def project_root() -> Path:
    """Default root for outputs/ and .cache/: the source checkout, or the current folder when
    fa-train is installed (never site-packages)."""
    return CHECKOUT_DIR if is_source_checkout() else Path.cwd().resolve()
