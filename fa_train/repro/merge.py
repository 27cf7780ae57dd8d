"""Bring a recipe's results from another output folder (a GPU host's scratch copy) into this one.

Each run of the source whose entry finished later than this folder's (or that this folder lacks)
replaces it: the results.json entry, with the source folder's paths in its command and overrides
rewritten to this folder's, and the run's whole folder, where the records that point at its files
(metrics.json, config.yaml, hparams.yaml) are rewritten the same way; logs stay as written; a
finished training run's metrics.csv is kept compressed (metrics_csv.compress).
Earlier or equal entries stay as they are. Then the checkpoints kept for transfers that are all done
go (`release_merged_sources`), as after `fa-repro run`.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fa_train.repro.metrics_csv import compress_if_finished
from fa_train.repro.recipe import RecipeError, load_recipe
from fa_train.repro.runner import RESULTS_FILE, Results, default_out_dir, load_json, release_sources

RECORDS = ("metrics.json", "config.yaml", "hparams.yaml")   # a run's files that name its paths


def _recorded_root(entry: dict[str, Any]) -> str | None:
    """The output folder a run's command named: its own folder (hydra.run.dir=..., or the bench's
    --out ...) less the run's name."""
    suffix = "/" + str(entry.get("run_dir", ""))
    for arg in entry.get("command") or []:
        if isinstance(arg, str) and arg.endswith(suffix):
            return arg.split("=", 1)[-1][:-len(suffix)]
    return None


def _moved(value: Any, old: str, new: str) -> Any:
    """`value` with paths inside folder `old` moved to folder `new`, in every string it holds."""
    if isinstance(value, str):
        return new if value == old else value.replace(old + "/", new + "/")
    if isinstance(value, list):
        return [_moved(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, old, new) for k, v in value.items()}
    return value


def relocate_records(folder: Path, old: str, new: str) -> None:
    """Rewrite paths inside folder `old` to folder `new` in the run records (RECORDS) of `folder`."""
    for name in RECORDS:
        path = folder / name
        if path.is_file():
            text = path.read_text()
            if old + "/" in text:
                path.write_text(text.replace(old + "/", new + "/"))


def merge_results(src: Path | str, dest: Path | str | None = None,
                  only: list[str] | None = None) -> tuple[Path, list[str]]:
    """Merge the runs of output folder `src` into `dest` (default: the recipe's folder under
    reports/, created when missing); return `dest` and the names of the runs taken."""
    src = Path(src)
    theirs = load_json(src / RESULTS_FILE)
    if not theirs or "recipe" not in theirs or "scale" not in theirs:
        raise RecipeError(f"{src} has no readable {RESULTS_FILE} with its recipe and scale")
    recipe, scale = load_recipe(theirs["recipe"]), theirs["scale"]
    dest = Path(dest) if dest is not None else default_out_dir(recipe, scale)
    held = load_json(dest / RESULTS_FILE)
    for key in ("recipe", "scale"):
        if held and held.get(key) != theirs[key]:
            raise RecipeError(f"{src} holds {key} {theirs[key]!r} but {dest} holds "
                              f"{held.get(key)!r}: merge folders of the same recipe and scale")
    ours = Results(dest, recipe, scale)   # written only when a run is recorded
    held_last = max((str(e.get("finished") or "") for e in (held or {}).get("runs", {}).values()),
                    default="")
    unknown = sorted(set(only or []) - set(theirs.get("runs", {})))
    if unknown:
        raise RecipeError(f"--only names runs that {src} does not hold: {', '.join(unknown)}")
    taken = []
    for name, entry in theirs.get("runs", {}).items():
        mine = ours.run(name)
        if (only and name not in only) or \
                (mine and str(mine.get("finished") or "") >= str(entry.get("finished") or "")):
            continue
        root = _recorded_root(entry)
        if root is not None and root != str(dest):
            entry = _moved(entry, root, str(dest))
        folder = src / str(entry.get("run_dir", name))
        if folder.is_dir():
            target = dest / str(entry.get("run_dir", name))
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(folder, target)
            if root is not None:
                relocate_records(target, root, str(dest.resolve()))
            compress_if_finished(target, entry.get("kind"), entry.get("status"))
        if str(entry.get("finished") or "") > held_last:   # the host of the latest run made
            ours.data["host"] = theirs.get("host")
        ours.record(name, entry)
        taken.append(name)
    return dest, taken


def release_merged_sources(dest: Path | str) -> list[str]:
    """`release_sources` for the recipe and scale that `dest`'s results.json holds."""
    dest = Path(dest)
    data = load_json(dest / RESULTS_FILE) or {}
    if "recipe" not in data or "scale" not in data:
        return []
    recipe = load_recipe(data["recipe"])
    return release_sources(recipe, data["scale"], dest, Results(dest, recipe, data["scale"]))
