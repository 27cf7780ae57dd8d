"""Initializing a model from the weights of another run (fine-tuning, Path-64 -> Path-X transfer)."""
from __future__ import annotations

from pathlib import Path

from fa_train.models.classifier import SequenceClassifier, load_with_position_interpolation


def checkpoint_file(path: str | Path, arg: str) -> Path:
    """The checkpoint `path` names: a file, or a run folder's checkpoints/last.ckpt."""
    p = Path(str(path)).expanduser()
    if p.is_dir():
        p = p / "checkpoints" / "last.ckpt"
    if not p.is_file():
        raise FileNotFoundError(f"{arg} checkpoint not found: {p}")
    return p


def read_state_dict(path: str | Path, arg: str) -> tuple[Path, dict]:
    """(file, model state dict) of a Lightning .ckpt, a run folder or a plain state dict, keys
    without the task's ``model.`` prefix; `arg` names the setting in errors."""
    import torch
    p = checkpoint_file(path, arg)
    state = torch.load(p, map_location="cpu", weights_only=False)
    sd = state.get("state_dict", state)
    return p, {k[len("model."):] if k.startswith("model.") else k: v for k, v in sd.items()}


def load_init_weights(model, path: str | Path) -> None:
    """Initialize model weights from a checkpoint (Lightning .ckpt, a run folder, or a plain
    state dict); sequence classifiers interpolate learned 2D position grids to their image size
    (e.g. Path-64 -> Path-X)."""
    p, sd = read_state_dict(path, "init_from")
    if isinstance(model, SequenceClassifier):
        load_with_position_interpolation(model, sd)
    else:
        model.load_state_dict(sd)
    print(f"[fa-train] initialized model weights from {p}")
