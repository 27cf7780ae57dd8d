"""Initializing a model from the weights of another run (fine-tuning, Path-64 -> Path-X transfer)."""
from __future__ import annotations

from pathlib import Path

from fa_train.errors import UserError
from fa_train.models.classifier import SequenceClassifier, interpolated_state


def checkpoint_file(path: str | Path, arg: str) -> Path:
    """The checkpoint `path` names: a file, or a run folder's checkpoints/last.ckpt."""
    p = Path(str(path)).expanduser()
    if p.is_dir():
        p = p / "checkpoints" / "last.ckpt"
    if not p.is_file():
        raise FileNotFoundError(f"{arg}: no checkpoint at {p}")
    return p


def read_state_dict(path: str | Path, arg: str) -> tuple[Path, dict]:
    """(file, model state dict) of a Lightning .ckpt, a run folder or a plain state dict, keys
    without the task's ``model.`` prefix; `arg` names the setting in errors."""
    import torch
    p = checkpoint_file(path, arg)
    state = torch.load(p, map_location="cpu", weights_only=False)
    sd = state.get("state_dict", state)
    return p, {k[len("model."):] if k.startswith("model.") else k: v for k, v in sd.items()}


def _names(keys: list[str], most: int = 3) -> str:
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def misfit(model, state_dict: dict) -> str | None:
    """How `state_dict` fails to fit `model` (weights it lacks or has beyond the model's, other
    shapes), or None when it fits."""
    own = model.state_dict()
    lacking = [k for k in own if k not in state_dict]
    extra = [k for k in state_dict if k not in own]
    shapes = [f"{k} {tuple(state_dict[k].shape)} against {tuple(v.shape)}" for k, v in own.items()
              if k in state_dict and hasattr(state_dict[k], "shape") and state_dict[k].shape != v.shape]
    parts = ([f"lacks {len(lacking)} of the model's weights ({_names(lacking)})"] if lacking else []) \
        + ([f"holds {len(extra)} weights the model has not ({_names(extra)})"] if extra else []) \
        + ([f"holds other shapes, its own against the model's: {_names(shapes)}"] if shapes else [])
    return "the checkpoint " + "; it ".join(parts) if parts else None


def load_weights(model, state_dict: dict, source: str) -> None:
    """`model.load_state_dict(state_dict)`; weights that do not fit are one UserError that names
    `source` (the setting and its file) and how they differ."""
    why = misfit(model, state_dict)
    if why is not None:
        raise UserError(f"{source} does not fit this model: {why}")
    model.load_state_dict(state_dict)


def load_init_weights(model, path: str | Path) -> None:
    """Initialize model weights from a checkpoint (Lightning .ckpt, a run folder, or a plain
    state dict); sequence classifiers interpolate learned 2D position grids to their image size
    (e.g. Path-64 -> Path-X)."""
    p, sd = read_state_dict(path, "init_from")
    if isinstance(model, SequenceClassifier):
        sd = interpolated_state(model, sd)
    load_weights(model, sd, f"init_from {p}")
    print(f"[fa-train] initialized model weights from {p}")
