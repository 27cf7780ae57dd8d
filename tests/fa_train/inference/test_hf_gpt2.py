"""Hugging Face GPT-2 weights onto our GPT: a tiny random GPT-2-shaped state dict written to a
temporary directory, checked against a float64 GPT-2 forward written from HF's weight layout
(and against transformers itself where it is installed)."""
import json
import math
import struct

import pytest
import torch
import torch.nn.functional as F

from fa_train.errors import UserError
from fa_train.inference.hf_gpt2 import read_safetensors
from fa_train.inference.loading import load_gpt

CONFIG = dict(model_type="gpt2", vocab_size=101, n_positions=32, n_embd=24, n_layer=2, n_head=3,
              activation_function="gelu_new", layer_norm_epsilon=1e-5)


def random_gpt2_state(seed=0):
    """GPT2LMHeadModel-style keys; Conv1D weights (in, out)."""
    g = torch.Generator().manual_seed(seed)
    c, v, n = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"]
    r = lambda *s: torch.randn(*s, generator=g) * 0.3  # noqa: E731
    sd = {"transformer.wte.weight": r(v, c), "transformer.wpe.weight": r(n, c),
          "transformer.ln_f.weight": 1 + r(c), "transformer.ln_f.bias": r(c)}
    for i in range(CONFIG["n_layer"]):
        p = f"transformer.h.{i}."
        sd.update({p + "ln_1.weight": 1 + r(c), p + "ln_1.bias": r(c),
                   p + "attn.c_attn.weight": r(c, 3 * c), p + "attn.c_attn.bias": r(3 * c),
                   p + "attn.c_proj.weight": r(c, c), p + "attn.c_proj.bias": r(c),
                   p + "ln_2.weight": 1 + r(c), p + "ln_2.bias": r(c),
                   p + "mlp.c_fc.weight": r(c, 4 * c), p + "mlp.c_fc.bias": r(4 * c),
                   p + "mlp.c_proj.weight": r(4 * c, c), p + "mlp.c_proj.bias": r(c),
                   p + "attn.bias": torch.ones(1, 1, n, n).tril()})  # old checkpoints' mask
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    return sd


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def gpt2_reference(sd, ids):
    """GPT-2 forward in float64 straight from the HF state dict (x @ W + b for Conv1D)."""
    sd = {k.removeprefix("transformer."): v.double() for k, v in sd.items()}
    c, h = CONFIG["n_embd"], CONFIG["n_head"]
    n = ids.shape[1]
    x = sd["wte.weight"][ids] + sd["wpe.weight"][:n]
    ln = lambda x, p: F.layer_norm(x, (c,), sd[p + ".weight"], sd[p + ".bias"], 1e-5)  # noqa: E731
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(CONFIG["n_layer"]):
        p = f"h.{i}."
        q, k, v = (ln(x, p + "ln_1") @ sd[p + "attn.c_attn.weight"] + sd[p + "attn.c_attn.bias"]
                   ).split(c, dim=-1)
        q, k, v = (t.view(1, n, h, c // h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2) / math.sqrt(c // h)).masked_fill(~mask, -math.inf)
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(1, n, c)
        x = x + y @ sd[p + "attn.c_proj.weight"] + sd[p + "attn.c_proj.bias"]
        m = ln(x, p + "ln_2") @ sd[p + "mlp.c_fc.weight"] + sd[p + "mlp.c_fc.bias"]
        m = F.gelu(m, approximate="tanh")
        x = x + m @ sd[p + "mlp.c_proj.weight"] + sd[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ sd["wte.weight"].T


def hf_dir(tmp_path, fmt="safetensors", config=CONFIG):
    sd = random_gpt2_state()
    (tmp_path / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        write_safetensors(tmp_path / "model.safetensors",
                          {k: v for k, v in sd.items() if k != "lm_head.weight"})
    else:
        torch.save(sd, tmp_path / "pytorch_model.bin")
    return tmp_path, sd


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_weights_give_gpt2_logits(tmp_path, fmt):
    directory, sd = hf_dir(tmp_path, fmt)
    loaded = load_gpt(directory, attention="sdpa")
    model = loaded.model
    assert model.config.max_seq_len == 32 and model.config.vocab_size == 101
    assert loaded.tokenizer is None
    ids = torch.randint(0, 101, (1, 19), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(model(ids).double(), gpt2_reference(sd, ids), atol=1e-4, rtol=1e-4)


def test_safetensors_reader_round_trips_dtypes(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.float32)}
    write_safetensors(tmp_path / "x.safetensors", tensors)
    back = read_safetensors(tmp_path / "x.safetensors")
    assert back.keys() == tensors.keys()
    for k in tensors:
        assert torch.equal(back[k], tensors[k])


def test_against_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    directory, sd = hf_dir(tmp_path, "bin")
    ref = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    ids = torch.randint(0, 101, (2, 13), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref(ids).logits
    torch.testing.assert_close(load_gpt(directory, attention="sdpa").model(ids), expected,
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("change,message", [
    (dict(model_type="llama"),
     "holds a 'llama' model; fa-generate reads Hugging Face model_type 'gpt2'"),
    (dict(activation_function="relu"), "activation_function 'relu' is not supported"),
])
def test_other_models_are_refused(tmp_path, change, message):
    directory, _ = hf_dir(tmp_path, "bin", {**CONFIG, **change})
    with pytest.raises(UserError, match=message):
        load_gpt(directory)


def test_missing_weights_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor pytorch_model"):
        load_gpt(tmp_path)
    torch.save({"wte.weight": torch.zeros(101, 24)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(UserError, match="the GPT-2 weights lack"):
        load_gpt(tmp_path)
