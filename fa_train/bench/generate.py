"""Text generation throughput at batch 1: prefill and KV-cache decode tokens/s of our GPT per
attention implementation (flash: kernels.flash_attn_with_kvcache; sdpa/standard: the PyTorch
cache path), beside Hugging Face transformers' ``generate`` on the same weights when transformers
is importable. On CUDA each implementation is timed twice: eager decode steps (row ``flash``)
and decode steps replayed from one CUDA graph (row ``flash-graph``, fa_train.inference.decode_step;
``graph=False`` leaves these rows out).

Weights: a GPT-2 preset initialized at random (the same tensors are loaded into both models), or
``checkpoint``: an fa-train run or a Hugging Face GPT-2 directory (transformers then loads that
directory). Greedy decoding of ``new_tokens`` after a random ``prompt_len``-token prompt;
``agree_with_hf``: how many leading generated tokens equal transformers' (low precision may part
ways after a near-tie). ``prompt_text`` replaces the random prompt with text in the checkpoint's
tokenizer.

``draft`` (a smaller fa-train run or GPT-2 directory with the same vocabulary) adds speculative
rows ``IMPL-spec W`` per draft tree ``W`` (children per node at each level, e.g. ``2,2,1``):
eager, with the acceptance rate, the draft tokens accepted per target pass, and whether the
output equals the eager greedy output of the same implementation, as it must.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fa_train.bench.attention import _check_list
from fa_train.bench.common import (RunOptions, environment, free_memory, is_oom, parse_dtype,
                                   resolve_device, short_reason, synchronize)
from fa_train.bench.report import Table, write_reports
from fa_train.inference import Sampling, generate, speculative_generate
from fa_train.inference.hf_gpt2 import is_hf_dir, to_gpt_state
from fa_train.models.gpt import GPT2_PRESETS

IMPLS = ("flash", "sdpa", "standard")
HF = "hf-transformers"


@dataclass
class GenerateBenchConfig(RunOptions):
    model: str = "gpt2-small"
    checkpoint: str | None = None
    impls: list = field(default_factory=lambda: ["flash", "sdpa"])
    prompt_len: int = 128
    new_tokens: int = 256
    repeats: int = 3
    dtype: str = "bf16"
    hf: bool = True
    graph: bool = True  # also the CUDA-graph decode rows (CUDA only)
    prompt_text: str | None = None
    draft: str | None = None
    spec_trees: list = field(default_factory=lambda: ["1,1,1,1"])

    def validate(self):
        self.impls = _check_list("impls", self.impls, allowed=IMPLS)
        if self.checkpoint is None and self.model not in GPT2_PRESETS:
            raise ValueError(f"model must be one of {sorted(GPT2_PRESETS)}, got {self.model!r}")
        if self.checkpoint is None and (self.prompt_text or self.draft):
            raise ValueError("checkpoint is required with prompt_text or draft (trained weights "
                             "and their tokenizer), got none")
        self.spec_trees = [parse_tree(t) for t in self.spec_trees]
        for name in ("prompt_len", "new_tokens", "repeats"):
            _check_list(name, [getattr(self, name)], positive=True)
        parse_dtype(self.dtype)
        resolve_device(self.device)
        for name in ("checkpoint", "draft"):
            path = getattr(self, name)
            if path is not None and not Path(path).exists():
                raise ValueError(f"{name} {path}: not found")
        return self


def parse_tree(text) -> str:
    """A draft tree as 'W,W,...' (children per node at each level, each >= 1)."""
    widths = str(text).split(",")
    if not all(w.strip().isdigit() and int(w) >= 1 for w in widths):
        raise ValueError(f"spec_trees must be comma lists of integers >= 1 (e.g. 2,2,1), "
                         f"got {text!r}")
    return ",".join(w.strip() for w in widths)


def hf_model(config, dtype, device):
    """transformers' GPT2LMHeadModel: the checkpoint directory's, or the preset's shape at random
    (None: transformers is not importable, or the checkpoint is an fa-train run)."""
    try:
        import transformers
    except ImportError:
        return None
    if config.checkpoint is not None:
        if not is_hf_dir(config.checkpoint):
            return None
        model = transformers.GPT2LMHeadModel.from_pretrained(config.checkpoint)
    else:
        p = GPT2_PRESETS[config.model]
        torch.manual_seed(config.seed)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=50257, n_positions=1024, n_embd=p["d_model"], n_layer=p["n_layer"],
            n_head=p["n_head"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    return model.to(device, dtype).eval()


def our_model(config, impl, device, dtype, reference):
    """Our GPT for `impl`: the checkpoint's, or `reference`'s weights (a transformers model;
    without one, the preset initialized by our own seeded init)."""
    from fa_train.inference.loading import load_gpt
    from fa_train.models import GPT
    if config.checkpoint is not None:
        return load_gpt(config.checkpoint, {"impl": impl}, device, dtype).model
    torch.manual_seed(config.seed)
    model = GPT(preset=config.model, vocab_size=50257, max_seq_len=1024, dropout=0.0,
                attention={"impl": impl})
    if reference is not None:
        state = {k: v.float().cpu() for k, v in reference.state_dict().items()}
        model.load_state_dict(to_gpt_state(state, model.config.n_layer, model.wte.num_embeddings))
    return model.to(device, dtype).eval()


def timed(run, config):
    """`run(new_tokens)` (a Generation) after a warm-up, `repeats` times: the first run and the
    median prefill and decode seconds."""
    run(min(8, config.new_tokens))
    runs = [run(config.new_tokens) for _ in range(config.repeats)]
    return (runs[0], statistics.median([r.timing.prefill_s for r in runs]),
            statistics.median([r.timing.decode_s for r in runs]))


def time_ours(model, prompt, config, cuda_graph):
    sampling = Sampling(temperature=0.0)
    first, prefill_s, decode_s = timed(
        lambda n: generate(model, [prompt], n, sampling, cuda_graph=cuda_graph), config)
    return first.tokens[0], prefill_s, decode_s


def time_speculative(target, draft, prompt, config, tree):
    widths = [int(w) for w in tree.split(",")]
    first, prefill_s, decode_s = timed(
        lambda n: speculative_generate(target, draft, prompt, n, widths), config)
    return first.tokens[0], prefill_s, decode_s, first.stats


def time_hf(model, prompt, config, device):
    ids = torch.tensor([prompt], device=device)

    def run(n):
        synchronize(device)
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             use_cache=True, pad_token_id=0, attention_mask=torch.ones_like(ids))
        synchronize(device)
        return out[0, len(prompt):].tolist(), time.perf_counter() - start

    run(min(8, config.new_tokens))  # warm-up
    prefill_s = statistics.median([run(1)[1] for _ in range(config.repeats)])
    timed = [run(config.new_tokens) for _ in range(config.repeats)]
    return timed[0][0], prefill_s, statistics.median([s for _, s in timed]) - prefill_s


def _row(config, impl, tokens, prefill_s, decode_s, reference_tokens):
    n = config.new_tokens
    agree = None
    if reference_tokens is not None:
        agree = next((i for i, (a, b) in enumerate(zip(tokens, reference_tokens)) if a != b),
                     min(len(tokens), len(reference_tokens)))
    return dict(impl=impl, status="ok", prompt_len=config.prompt_len, new_tokens=n,
                prefill_tokens_per_s=config.prompt_len / prefill_s,
                decode_tokens_per_s=n / decode_s,
                end_to_end_tokens_per_s=n / (prefill_s + decode_s),
                prefill_ms=prefill_s * 1e3, decode_ms_per_token=decode_s * 1e3 / n,
                agree_with_hf=agree)


def make_prompt(config) -> list[int]:
    if config.prompt_text:
        from fa_train.inference.loading import load_tokenizer
        tokenizer = load_tokenizer(config.checkpoint)
        return tokenizer.encode(config.prompt_text, add_special_tokens=False).ids
    gen = torch.Generator().manual_seed(config.seed)
    return torch.randint(0, 256, (config.prompt_len,), generator=gen).tolist()


def speculative_rows(config, impl, model, prompt, device, dtype, greedy_tokens):
    from fa_train.inference.loading import load_gpt
    draft = load_gpt(config.draft, {"impl": impl}, device, dtype, arg="draft").model
    rows = []
    for tree in config.spec_trees:
        tokens, prefill_s, decode_s, stats = time_speculative(model, draft, prompt, config, tree)
        rows.append(dict(_row(config, f"{impl}-spec {tree}", tokens, prefill_s, decode_s, None),
                         acceptance_rate=stats["acceptance_rate"],
                         accepted_per_pass=stats["accepted_per_pass"],
                         target_passes=stats["target_passes"],
                         equal_to_greedy=tokens == greedy_tokens))
    return rows


def run_generate_bench(config: GenerateBenchConfig) -> list[dict]:
    device, dtype = resolve_device(config.device), parse_dtype(config.dtype)
    reference = hf_model(config, dtype, device) if config.hf else None
    prompt = make_prompt(config)
    config.prompt_len = len(prompt)
    rows, hf_tokens = [], None
    if reference is not None:
        hf_tokens, prefill_s, decode_s = time_hf(reference, prompt, config, device)
        rows.append(_row(config, HF, hf_tokens, prefill_s, decode_s, None))
    graph_modes = (False, True) if config.graph and device.type == "cuda" else (False,)
    for impl in config.impls:
        model = None
        for cuda_graph in graph_modes:
            name = f"{impl}-graph" if cuda_graph else impl
            try:
                if model is None:
                    model = our_model(config, impl, device, dtype, reference)
                tokens, prefill_s, decode_s = time_ours(model, prompt, config, cuda_graph)
                rows.append(_row(config, name, tokens, prefill_s, decode_s, hf_tokens))
                if config.draft and not cuda_graph:
                    rows += speculative_rows(config, impl, model, prompt, device, dtype, tokens)
            except Exception as exc:  # noqa: BLE001 - a failed case is a row, the others run
                rows.append(dict(impl=name, status="oom" if is_oom(exc) else "error",
                                 reason=short_reason(exc)))
        del model
        free_memory(device)
    return rows


_CASE = ("prompt_len", "new_tokens")
GENERATE_TABLES = (
    Table("End-to-end tokens/s (batch 1, greedy)", _CASE, "impl", "end_to_end_tokens_per_s",
          ",.1f"),
    Table("Decode tokens/s", _CASE, "impl", "decode_tokens_per_s", ",.1f"),
    Table("Prefill tokens/s", _CASE, "impl", "prefill_tokens_per_s", ",.0f"),
    Table("Leading tokens equal to transformers' greedy output", _CASE, "impl", "agree_with_hf",
          "d"),
    Table("Speculative: draft tokens accepted per target pass", _CASE, "impl",
          "accepted_per_pass", ".2f"),
    Table("Speculative: acceptance rate (accepted / drafted along the tree's depth)", _CASE,
          "impl", "acceptance_rate", ".3f"),
)


def write_generate_reports(rows, out_dir, config, name="generate"):
    if isinstance(config, dict):
        config = GenerateBenchConfig(**config)
    weights = config.checkpoint or f"{config.model}, random weights"
    prompt = f"the prompt {config.prompt_text!r}" if config.prompt_text else "a random prompt"
    notes = [f"Weights: {weights}; {config.dtype}; batch 1, greedy; {prompt} of "
             f"{config.prompt_len} tokens, {config.new_tokens} new tokens; median of "
             f"{config.repeats} runs after a warm-up."]
    spec = [r for r in rows if "equal_to_greedy" in r]
    if spec:
        same = all(r["equal_to_greedy"] for r in spec)
        notes.append(f"IMPL-spec W: speculative greedy decoding drafted by {config.draft} (tree "
                     f"widths W per level, eager); output equal to the eager greedy output: "
                     f"{'yes, every row' if same else 'NO in some rows'}.")
    if any(r["impl"].endswith("-graph") for r in rows):
        notes.append("IMPL-graph: decode steps replayed from one CUDA graph (its capture counted "
                     "in decode time); IMPL: eager decode steps.")
    if any(r["impl"] == HF for r in rows):
        notes.append(f"{HF}: transformers' generate on the same weights (its prefill: a "
                     "generate call of one new token).")
    else:
        notes.append("No transformers row: transformers is not importable, or the weights are "
                     "an fa-train run.")
    notes.append("")
    tables = [t for t in GENERATE_TABLES if any(r.get(t.value) is not None for r in rows)]
    return write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                         asdict(config), tables or GENERATE_TABLES, (), notes)
