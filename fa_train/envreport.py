"""``fa-train --version``: the versions that decide kernel behaviour, and whether they were tested.

The tested stacks are the ones scripts/setup_env.sh installs: every GPU result in reports/ was
measured on torch 2.11 + triton 3.6 (CUDA); the CPU test suite runs torch 2.13 (CPU build) with
triton 3.6's interpreter.
"""
from __future__ import annotations

import sys
from importlib import metadata

TESTED_STACKS = {"cuda": ("2.11", "3.6"), "cpu": ("2.13", "3.6")}  # device -> (torch, triton)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _minor(version: str | None) -> str | None:
    return ".".join(version.split("+")[0].split(".")[:2]) if version else None


def environment() -> dict:
    """fa-train, torch, triton, CUDA and GPU as seen by this process."""
    import torch

    from fa_train import __version__

    cuda = torch.cuda.is_available()
    return {
        "fa-train": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "device": "cuda" if cuda else "cpu",
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }


def untested_warning(env: dict) -> str | None:
    """A warning line when torch/triton on this device is not a tested stack, else None."""
    want_torch, want_triton = TESTED_STACKS[env["device"]]
    if (_minor(env["torch"]), _minor(env["triton"])) == (want_torch, want_triton):
        return None
    tested = "; ".join(f"{dev}: torch {t} + triton {tr}" for dev, (t, tr) in TESTED_STACKS.items())
    return (f"warning: torch {env['torch']} + triton {env['triton']} on {env['device']} is not a "
            f"tested stack ({tested}); scripts/setup_env.sh installs the tested one")


def report(env: dict | None = None) -> str:
    env = env or environment()
    lines = [f"{key:<9}{value if value is not None else '-'}" for key, value in env.items()]
    warning = untested_warning(env)
    return "\n".join(lines + ([warning] if warning else []))


def print_report() -> int:
    print(report())
    return 0
