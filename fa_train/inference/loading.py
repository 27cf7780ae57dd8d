"""A GPT and its tokenizer for inference: from an fa-train run (its folder or a .ckpt inside it)
or from a Hugging Face GPT-2 directory (fa_train.inference.hf_gpt2).

An fa-train run's model is rebuilt from the run's resolved config.yaml and its tokenizer is the
one its datamodule tokenized the data with (``<cache_dir>/lm/<...>/tokenizer.json``), unless a
tokenizer file is given.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fa_train.data.tokenizer import EOT
from fa_train.errors import UserError
from fa_train.inference import hf_gpt2
from fa_train.models import GPT
from fa_train.models.loading import checkpoint_file, load_weights, read_state_dict

GPT_TARGET = "fa_train.models.GPT"


@dataclass
class LoadedModel:
    model: GPT
    tokenizer: Any     # tokenizers.Tokenizer, or None when the checkpoint names none
    source: str        # what was loaded, for messages

    @property
    def eos_id(self) -> int | None:
        return None if self.tokenizer is None else self.tokenizer.token_to_id(EOT)


def run_config(ckpt: Path, arg: str) -> dict:
    """The resolved config.yaml of the run that wrote `ckpt` (<run>/checkpoints/<file>)."""
    from omegaconf import OmegaConf
    cfg_file = ckpt.parent.parent / "config.yaml"
    if ckpt.parent.name != "checkpoints" or not cfg_file.is_file():
        raise UserError(f"{arg} {ckpt}: no config.yaml of its run (expected {cfg_file}); pass a "
                        "checkpoint inside an fa-train run folder")
    return OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=True)


def run_tokenizer(cfg: dict, source: str):
    """The tokenizer file the run's datamodule wrote beside its token files."""
    from hydra.utils import instantiate
    from tokenizers import Tokenizer
    with contextlib.redirect_stdout(sys.stderr):  # data notes stay out of the generated text
        datamodule = instantiate(cfg["data"], _convert_="all")
    path = Path(getattr(datamodule, "data_dir", "")) / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"tokenizer of {source} not found (expected {path}); pass --tokenizer "
                        "with its tokenizers JSON file")
    return Tokenizer.from_file(str(path))


def load_tokenizer(path: str | Path, arg: str = "checkpoint"):
    """The tokenizer load_gpt gives the GPT at `path`, without loading its weights."""
    p = Path(str(path)).expanduser()
    if hf_gpt2.is_hf_dir(p):
        return hf_gpt2.hf_tokenizer(p)
    ckpt = checkpoint_file(p, arg)
    return run_tokenizer(run_config(ckpt, arg), f"fa-train run checkpoint {ckpt}")


def load_run(path, attention: Any, arg: str) -> tuple[GPT, dict, Path]:
    ckpt = checkpoint_file(path, arg)
    cfg = run_config(ckpt, arg)
    model_cfg = dict(cfg.get("model") or {})
    target = model_cfg.pop("_target_", None)
    if target != GPT_TARGET:
        raise UserError(f"{arg} {ckpt} holds a {target} model; fa-generate needs a GPT "
                        f"({GPT_TARGET})")
    model = GPT(**{**model_cfg, "attention": attention, "activation_checkpointing": False})
    load_weights(model, read_state_dict(ckpt, arg)[1], f"{arg} {ckpt}")
    return model, cfg, ckpt


def load_gpt(path: str | Path, attention: Any = "auto", device="cpu",
             dtype: torch.dtype = torch.float32, tokenizer_file: str | None = None,
             arg: str = "checkpoint") -> LoadedModel:
    """The GPT at `path` (an fa-train run folder or .ckpt, or a Hugging Face GPT-2 directory) in
    eval mode on `device` in `dtype`, with its tokenizer (`tokenizer_file` overrides it); `arg`
    names the option in errors."""
    from tokenizers import Tokenizer
    p = Path(str(path)).expanduser()
    tokenizer = None
    if tokenizer_file:
        if not Path(tokenizer_file).is_file():
            raise FileNotFoundError(f"tokenizer {tokenizer_file} does not exist")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    if hf_gpt2.is_hf_dir(p):
        config = hf_gpt2.read_hf_config(p)
        model = GPT(**hf_gpt2.gpt_kwargs(config), attention=attention)
        load_weights(model, hf_gpt2.to_gpt_state(hf_gpt2.read_hf_weights(p), config["n_layer"],
                                                 model.wte.num_embeddings), f"{arg} {p}")
        tokenizer = tokenizer or hf_gpt2.hf_tokenizer(p)
        source = f"Hugging Face GPT-2 {p}"
    else:
        model, cfg, ckpt = load_run(p, attention, arg)
        source = f"fa-train run checkpoint {ckpt}"
        tokenizer = tokenizer or run_tokenizer(cfg, source)
    model = model.to(device=device, dtype=dtype).eval()
    return LoadedModel(model, tokenizer, source)
