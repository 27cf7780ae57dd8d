"""Checkpoint files: atomic writes, integrity checks, and choosing the checkpoint to resume from.

``resume`` (configs/config.yaml):
- null: start fresh.
- ``auto``: the newest readable checkpoint under this experiment's folder whose model and data
  settings match the current config; corrupt ones and mismatching ones are skipped with a line
  saying why (the differing keys); none left -> start fresh.
- a ``.ckpt`` file or a run folder (its newest readable ``checkpoints/*.ckpt``): that checkpoint;
  an unreadable file or mismatching settings are errors.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# Settings that may change between a run and its continuation: where data lives and how it is
# loaded, and activation checkpointing (memory only). Everything else in model/data must match.
# keys added after checkpoints were saved without them: the behaviour those checkpoints had
ADDED_KEYS = {"model.pos_emb": "learned", "data.windows_per_draw": 1}
RUNTIME_KEYS = {"data.num_workers", "data.pin_memory", "data.cache_dir", "data.data_dir",
                "data.gen_workers", "data.num_proc", "data.eval_batch_size",
                "model.activation_checkpointing"}


def partial_path(path: str | Path) -> Path:
    """Where a file is written before `commit` renames it to `path` (not matched by *.ckpt)."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def commit(tmp: str | Path, path: str | Path) -> Path:
    """Flush `tmp` to disk and rename it over `path`: a crash at any point leaves either the old
    file or the new one, never half of one."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:  # make the rename itself durable
        fd = os.open(Path(path).parent, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    except OSError:  # pragma: no cover - directories cannot be opened on some platforms
        pass
    return Path(path)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` to `partial_path`, then `commit` it to `path`; a failed write (a full disk)
    leaves `path` as it was and no partial file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(path)
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return commit(tmp, path)


def is_readable(path: str | Path) -> bool:
    """Whether a torch.save file is complete: a zip archive whose members all pass their CRC."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    except (OSError, zipfile.BadZipFile, EOFError):
        return False


def checkpoint_step(path: str | Path) -> int:
    """The optimizer step a Lightning checkpoint was saved at (tensors are mapped, not read)."""
    import torch
    return int(torch.load(path, map_location="cpu", mmap=True, weights_only=False)["global_step"])


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_diff(current: dict, saved: dict) -> list[str]:
    """Keys of model/data whose values differ, as "key: saved -> current". Keys the current
    config leaves null (filled from the data later) and `RUNTIME_KEYS` are not compared; a key
    of `ADDED_KEYS` that the saved config predates counts as the value it implied then."""
    cur = {k: v for k, v in flatten({s: current.get(s) for s in ("model", "data")}).items()
           if v is not None and k not in RUNTIME_KEYS}
    old = {**ADDED_KEYS, **{k: v for k, v in flatten({s: saved.get(s) for s in ("model", "data")}).items()
                            if k not in RUNTIME_KEYS}}
    return [f"{k}: {old.get(k, '<absent>')!r} -> {cur[k]!r}" for k in sorted(cur)
            if old.get(k) != cur[k]]


@dataclass
class ResumePoint:
    path: Path
    run_dir: Path | None   # the run folder that wrote it (<run>/checkpoints/<file>.ckpt), if any


def _run_dir(ckpt: Path) -> Path | None:
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None


def _saved_config(ckpt: Path) -> dict | None:
    from omegaconf import OmegaConf
    run = _run_dir(ckpt)
    cfg_file = run / "config.yaml" if run else None
    if cfg_file is None or not cfg_file.is_file():
        return None
    return OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=False)


def _newest_first(paths) -> list[Path]:
    return sorted(paths, key=lambda p: p.stat().st_mtime, reverse=True)


def _pick(cands: list[Path], current: dict, strict: bool, log: Callable[[str], None]) -> Path | None:
    for p in cands:
        if not is_readable(p):
            msg = f"{p} is truncated or corrupt"
            if strict and p is cands[-1]:
                raise ValueError(f"resume: {msg} and no other checkpoint beside it is readable")
            log(f"resume: skipping {msg}")
            continue
        saved = _saved_config(p)
        diff = config_diff(current, saved) if saved is not None else []
        if diff:
            msg = f"{p} was trained with other settings: " + "; ".join(diff)
            if strict:
                raise ValueError(f"resume: {msg}")
            log(f"resume: skipping {msg}")
            continue
        return p
    return None


def find_resume_checkpoint(resume: Any, current: dict, experiment_dir: str | Path,
                           log: Callable[[str], None] = print) -> ResumePoint | None:
    """The checkpoint `resume` asks for (see the module docstring), or None to start fresh.
    `current` is the run's config as a dict (its model and data sections are compared)."""
    if resume in (None, "", False, "none", "null"):
        return None
    if str(resume) == "auto":
        root = Path(experiment_dir)
        cands = _newest_first(root.glob("**/checkpoints/*.ckpt"))
        found = _pick(cands, current, strict=False, log=log)
        if found is None:
            log(f"resume=auto: no usable checkpoint under {root}; starting fresh")
            return None
        log(f"resume=auto: continuing from {found}")
        return ResumePoint(found, _run_dir(found))
    p = Path(str(resume)).expanduser()
    if p.is_dir():
        cands = _newest_first((p / "checkpoints").glob("*.ckpt"))
        if not cands:
            raise FileNotFoundError(f"resume: no checkpoint in {p / 'checkpoints'}")
    elif p.is_file():
        cands = [p]
    else:
        raise FileNotFoundError(f"resume checkpoint not found: {p}")
    found = _pick(cands, current, strict=True, log=log)
    log(f"resume: continuing from {found}")
    return ResumePoint(found, _run_dir(found))
