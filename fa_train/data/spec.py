"""The data -> model contract: every datamodule describes its data with one `DataSpec`.

A datamodule implements ``spec() -> DataSpec`` (valid after ``setup()``), and the model is built
from it: each model argument left null in the model config is filled from the one spec field that
`MODEL_ARGS` names for it. A model argument left null that the datamodule's spec does not provide
is an error naming both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fa_train.errors import check_int


@dataclass(frozen=True)
class DataSpec:
    vocab_size: int | None = None    # token ids are in [0, vocab_size)
    seq_len: int | None = None       # tokens per sequence (per tower)
    num_classes: int | None = None   # classification targets
    pad_id: int | None = None        # the padding token id
    image_size: int | None = None    # side of the pixel grid, for image-as-sequence tasks
    num_towers: int = 1              # 2: two sequences per example (retrieval)
    multi_label: bool = False        # targets are multi-hot over num_classes
    eot_id: int | None = None        # the token that ends each document in a token stream


# model argument -> the DataSpec field that fills it
MODEL_ARGS = {"vocab_size": "vocab_size", "max_seq_len": "seq_len", "num_classes": "num_classes",
              "pad_token_id": "pad_id", "image_size": "image_size", "num_towers": "num_towers",
              "multi_label": "multi_label", "eot_id": "eot_id"}
OPTIONAL = {"image_size", "eot_id"}  # models without a pixel grid or documents take None


def datamodule_spec(dm: Any) -> DataSpec:
    """``dm.spec()`` after preparing and setting up `dm`."""
    name = type(dm).__name__
    if not callable(getattr(dm, "spec", None)):
        raise TypeError(f"datamodule {name} has no spec() method returning "
                        "fa_train.data.spec.DataSpec")
    if hasattr(dm, "prepare_data"):
        dm.prepare_data()
    if hasattr(dm, "setup"):
        dm.setup("fit")
    spec = dm.spec()
    if not isinstance(spec, DataSpec):
        raise TypeError(f"{name}.spec() returned {type(spec).__name__}, not DataSpec")
    return spec


def model_args_from_spec(model_cfg: Any, spec: DataSpec, datamodule: str, model: str) -> dict:
    """Values for the model arguments that `model_cfg` leaves null, read from `spec`; a
    model.max_seq_len set below the data's sequence length is a UserError."""
    limit = model_cfg.get("max_seq_len")
    if limit is not None and spec.seq_len is not None:
        check_int("model.max_seq_len", limit, low=spec.seq_len)
    out = {}
    for arg, field in MODEL_ARGS.items():
        if arg not in model_cfg or model_cfg[arg] is not None:
            continue
        value = getattr(spec, field)
        if value is None and arg not in OPTIONAL:
            raise ValueError(f"model {model} needs {arg}, left null in model.{arg}, but datamodule "
                             f"{datamodule} does not provide DataSpec.{field}; set model.{arg} "
                             f"or make {datamodule}.spec() provide {field}")
        out[arg] = value
    return out
