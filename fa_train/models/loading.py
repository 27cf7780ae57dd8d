"""Initializing a model from the weights of another run (fine-tuning, Path-64 -> Path-X transfer)."""
from __future__ import annotations

from pathlib import Path

from fa_train.models.classifier import SequenceClassifier, load_with_position_interpolation


def load_init_weights(model, path: str | Path) -> None:
    """Initialize model weights from a checkpoint (Lightning .ckpt, a run folder, or a plain
    state dict); sequence classifiers interpolate learned 2D position grids to their image size
    (e.g. Path-64 -> Path-X)."""
    import torch
    p = Path(str(path)).expanduser()
    if p.is_dir():
        p = p / "checkpoints" / "last.ckpt"
    if not p.is_file():
        raise FileNotFoundError(f"init_from checkpoint not found: {p}")
    state = torch.load(p, map_location="cpu", weights_only=False)
    sd = state.get("state_dict", state)
    sd = {k[len("model."):] if k.startswith("model.") else k: v for k, v in sd.items()}
    if isinstance(model, SequenceClassifier):
        load_with_position_interpolation(model, sd)
    else:
        model.load_state_dict(sd)
    print(f"[fa-train] initialized model weights from {p}")
