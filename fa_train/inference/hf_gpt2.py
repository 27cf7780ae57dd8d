"""Hugging Face GPT-2 weights from a local directory onto fa_train.models.GPT (no network, no
transformers needed).

The directory holds ``config.json`` (model_type gpt2) and ``model.safetensors`` (read here, the
safetensors package not needed) or ``pytorch_model.bin``; its tokenizer is ``tokenizer.json`` or
``vocab.json`` + ``merges.txt``. Hugging Face's Conv1D layers store weights as (in, out): they are
transposed onto our nn.Linear (out, in); the embedding is padded to our vocab_multiple rows.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from fa_train.errors import UserError

SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                      "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                      "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
PER_LAYER = ("ln_1.weight", "ln_1.bias", "attn.c_attn.bias", "attn.c_proj.bias", "ln_2.weight",
             "ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias") + CONV1D


def is_hf_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file() and not (p / "checkpoints").is_dir()


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file (8-byte header size, JSON header, raw little-endian
    data)."""
    raw = bytearray(Path(path).read_bytes())
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in SAFETENSORS_DTYPES:
            raise UserError(f"{path}: tensor {name} has dtype {info['dtype']}, which is not "
                            "supported")
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        begin, end = (8 + size + offset for offset in info["data_offsets"])
        flat = torch.frombuffer(raw, dtype=dtype, count=(end - begin) // dtype.itemsize,
                                offset=begin) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(info["shape"]).clone()
    return out


def read_hf_config(directory: Path) -> dict:
    config = json.loads((directory / "config.json").read_text())
    if config.get("model_type") != "gpt2":
        raise UserError(f"checkpoint {directory} holds a {config.get('model_type')!r} model; "
                        f"fa-generate reads Hugging Face model_type 'gpt2'")
    act = config.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UserError(f"checkpoint {directory}: activation_function {act!r} is not supported "
                        "(GPT-2's tanh GELU, gelu_new, is)")
    eps = config.get("layer_norm_epsilon", 1e-5)
    if config.get("scale_attn_by_inverse_layer_idx") or eps != 1e-5:
        raise UserError(f"checkpoint {directory}: scale_attn_by_inverse_layer_idx and a "
                        "layer_norm_epsilon other than 1e-5 are not supported")
    return config


def gpt_kwargs(config: dict) -> dict:
    """GPT constructor arguments for a Hugging Face GPT-2 config."""
    return dict(vocab_size=config["vocab_size"], max_seq_len=config["n_positions"],
                n_layer=config["n_layer"], n_head=config["n_head"], d_model=config["n_embd"],
                dropout=0.0, bias=True)


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        return read_safetensors(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"checkpoint {directory} has neither model.safetensors nor "
                            "pytorch_model.bin")


def to_gpt_state(hf: dict[str, torch.Tensor], n_layer: int, padded_vocab: int) -> dict:
    """Our GPT's state dict from a Hugging Face GPT-2 one (GPT2LMHeadModel or GPT2Model keys)."""
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()}
    wanted = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"] + \
        [f"h.{i}.{name}" for i in range(n_layer) for name in PER_LAYER]
    missing = [k for k in wanted if k not in hf]
    if missing:
        raise UserError(f"the GPT-2 weights lack {len(missing)} tensors, e.g. {missing[:3]}")
    wte = hf["wte.weight"]
    wte = torch.cat([wte, wte.new_zeros(padded_vocab - wte.shape[0], wte.shape[1])])
    state = {"wte.weight": wte, "lm_head.weight": wte, "wpe.weight": hf["wpe.weight"],
             "ln_f.weight": hf["ln_f.weight"], "ln_f.bias": hf["ln_f.bias"]}
    for i in range(n_layer):
        for name in PER_LAYER:
            value = hf[f"h.{i}.{name}"]
            state[f"blocks.{i}.{name}"] = value.t() if name in CONV1D else value
    return state


def hf_tokenizer(directory: Path):
    """The directory's tokenizer, or None when it has none."""
    from tokenizers import Tokenizer

    from fa_train.data.tokenizer import gpt2_tokenizer
    if (directory / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(directory / "tokenizer.json"))
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        return gpt2_tokenizer(directory / "vocab.json", directory / "merges.txt")
    return None
