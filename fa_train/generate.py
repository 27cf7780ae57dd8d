"""fa-generate: sample text from a trained GPT with a KV cache.

    fa-generate CHECKPOINT [--prompt TEXT ...] [--prompt-file FILE] [--max-new-tokens N]
                [--greedy | --temperature 0.8] [--top-k 50] [--top-p 0.95] [--seed 0]
                [--stop TEXT ...] [--no-stream] [--draft CHECKPOINT --spec-tree 2,2,1]
                [--attention auto] [--device auto] [--dtype auto] [--tokenizer FILE]
                [--threads N] [--cuda-graph | --no-cuda-graph]

CHECKPOINT: an fa-train run folder (outputs/<experiment>/<run id>), a .ckpt inside one, or a
local Hugging Face GPT-2 directory (config.json + model.safetensors or pytorch_model.bin). Without
a prompt it samples after the end-of-text token. One prompt streams to the terminal; several
(--prompt repeated, or a file with one per line) run as one batch. ``--draft`` turns on
speculative greedy decoding (output equal to ``--greedy``, which it implies). On CUDA each
decode step replays one CUDA graph (``--no-cuda-graph``: eager; speculative decoding is eager).
The last line (stderr) gives tokens/s of prefill and decode separately.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fa_train.errors import (UserError, check_choice, check_int, exit_on_user_error,
                             take_debug_flag)

DEFAULT_NEW_TOKENS = 64
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fa-generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="fa-train run folder or .ckpt, or a Hugging Face GPT-2 dir")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeat for a batch)")
    p.add_argument("--prompt-file", help="a text file with one prompt per line")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"tokens to generate per prompt (default {DEFAULT_NEW_TOKENS}, fewer where "
                        "the context ends sooner)")
    p.add_argument("--greedy", action="store_true", help="argmax decoding (temperature 0)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default 1.0; with --draft: greedy)")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass in (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--stop", action="append", default=[], help="stop text (repeatable)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                   help="print tokens as they come (one prompt only; default on)")
    p.add_argument("--draft", help="draft model for speculative greedy decoding (same tokenizer)")
    p.add_argument("--spec-tree", default="1,1,1,1",
                   help="draft tree: children per node at each level (1,1,1,1: a chain of 4)")
    p.add_argument("--attention", default="auto",
                   help="attention impl: auto (flash on CUDA, sdpa on CPU), sdpa, standard, flash")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--tokenizer", help="a tokenizers JSON file (default: the checkpoint's)")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="replay each decode step from a CUDA graph (default: on for CUDA)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's; 1 is often fastest for small "
                        "models on a busy CPU)")
    return p


def read_prompts(args) -> list[str]:
    prompts = list(args.prompt)
    if args.prompt_file:
        path = Path(args.prompt_file).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"prompt_file {path} does not exist")
        prompts += [line for line in path.read_text().splitlines() if line.strip()]
        if not prompts:
            raise UserError(f"prompt_file {path} holds no prompt (one per line)")
    return prompts


def parse_widths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(w) for w in text.split(","))
    except ValueError:
        raise UserError(f"spec_tree={text!r} is invalid: expected comma-separated integers "
                        ">= 1, e.g. 2,2,1") from None


def resolve_device(device: str, dtype: str):
    import torch
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError:
        raise UserError(f"device={device!r} is invalid: expected auto, cpu, cuda or "
                        "cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda is invalid: no CUDA GPU is available; use --device cpu")
    name = DTYPES.get(dtype) or ("bfloat16" if device.type == "cuda" else "float32")
    return device, getattr(torch, name)


def encode_prompts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each prompt; no prompt: the end-of-text token alone (unconditional)."""
    from fa_train.data.tokenizer import EOT
    if texts:
        return [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    eot = tokenizer.token_to_id(EOT)
    if eot is None:
        raise UserError(f"prompt is required: the tokenizer has no {EOT} token to start from")
    return [[eot]]


def run(args) -> int:
    from fa_train.inference import Sampling, generate, speculative_generate
    from fa_train.inference.decode_step import use_cuda_graph
    from fa_train.inference.generation import check_request
    from fa_train.inference.loading import load_gpt
    from fa_train.inference.text import StopStrings, Streamer

    from fa_train.attention import attention_class, attention_names
    from fa_train.attention.flash import triton_runs_on
    check_choice("attention", args.attention, attention_names())
    texts = read_prompts(args)
    greedy = args.greedy or (args.draft and args.temperature is None)
    temperature = 1.0 if args.temperature is None else args.temperature
    sampling = Sampling(0.0 if greedy else temperature, args.top_k, args.top_p)
    widths = parse_widths(args.spec_tree)
    if args.draft and not sampling.greedy:
        raise UserError("draft is invalid with --temperature above 0: speculative decoding "
                        "here is greedy")
    device, dtype = resolve_device(args.device, args.dtype)
    if attention_class(args.attention).runs_triton and not triton_runs_on(device):
        raise UserError(f"attention={args.attention!r} is invalid on {device}: its Triton kernels "
                        "need a CUDA GPU (or TRITON_INTERPRET=1, slow); on the CPU use sdpa, "
                        "standard or auto")
    if args.draft and args.cuda_graph:
        raise UserError("cuda_graph is invalid with --draft: speculative decoding runs eagerly; "
                        "drop --cuda-graph")
    use_cuda_graph(args.cuda_graph, device)
    if args.threads is not None:
        import torch
        torch.set_num_threads(check_int("threads", args.threads))
    target = load_gpt(args.checkpoint, args.attention, device, dtype, args.tokenizer)
    tok = target.tokenizer
    if tok is None:
        raise UserError(f"tokenizer not found for {target.source}; pass --tokenizer FILE")
    prompts = encode_prompts(tok, texts)
    room = target.model.config.max_seq_len - max(len(p) for p in prompts)
    max_new = (args.max_new_tokens if args.max_new_tokens is not None
               else max(1, min(DEFAULT_NEW_TOKENS, room)))
    check_request(target.model, prompts, max_new)
    decode = tok.decode
    stop = StopStrings(decode, args.stop) if args.stop else None
    stream = args.stream and len(prompts) == 1
    streamer = Streamer(decode, lambda s: print(s, end="", flush=True), stop) if stream else None
    if stream:
        print(texts[0] if texts else "", end="", flush=True)
    common = dict(max_new_tokens=max_new, eos_id=target.eos_id, stop=stop,
                  on_token=streamer)
    if args.draft:
        if len(prompts) > 1:
            raise UserError("draft is invalid with several prompts: speculative decoding runs "
                            "one prompt at a time")
        draft = load_gpt(args.draft, args.attention, device, dtype, args.tokenizer, arg="draft")
        result = speculative_generate(target.model, draft.model, prompts[0], widths=widths,
                                      **common)
    else:
        result = generate(target.model, prompts, sampling=sampling, seed=args.seed,
                          cuda_graph=args.cuda_graph, **common)
    outputs = [decode(t) for t in result.tokens]
    outputs = [stop.cut(t) for t in outputs] if stop else outputs
    if stream:
        streamer.finish(outputs[0])
        print()
    else:
        for i, (prompt, out) in enumerate(zip(texts or [""] * len(prompts), outputs)):
            print(f"--- sample {i}\n{prompt}{out}")
    print(f"[fa-generate] {result.timing.summary()}", file=sys.stderr)
    if result.stats:
        s = result.stats
        print(f"[fa-generate] speculative: {s['target_passes']} target passes, "
              f"{s['accepted_per_pass']:.2f} draft tokens accepted per pass "
              f"(acceptance rate {s['acceptance_rate']:.2f}, tree {s['tree_widths']})",
              file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv, debug = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    return exit_on_user_error("fa-generate", debug)(run)(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
