"""Tokenizers, all as `tokenizers.Tokenizer`, built or loaded by one function: `build_tokenizer`.

kinds:
- ``bpe``: byte-level BPE (GPT-2 style) trained on the corpus with `tokenizers`, ``vocab_size`` tokens
  including ``<|endoftext|>``; saved as JSON in the cache and loaded from there next time.
- ``gpt2``: the real GPT-2 BPE (50257 tokens) from ``vocab.json`` + ``merges.txt``; without files given
  they are fetched once into the cache (see `fa_train.data.corpus.fetch_gpt2_bpe`).
- ``file``: a saved `tokenizers` JSON (``tokenizer_file``).
- ``wordpiece``: BERT's uncased WordPiece, trained on the corpus, or loaded from a ``vocab.txt`` or a
  JSON given as ``tokenizer_file``. Special tokens [PAD] [UNK] [CLS] [SEP] [MASK].
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

EOT = "<|endoftext|>"
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
KINDS = ("bpe", "gpt2", "file", "wordpiece")
MIN_BPE_VOCAB = 258  # the 256 bytes, <|endoftext|> and one merge


def _save(tok: Tokenizer, path: str | Path) -> Tokenizer:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tok.save(str(tmp))
    os.replace(tmp, path)
    return tok


def _file(path: str | Path | None, arg: str) -> Path:
    if path is None:
        raise ValueError(f"{arg} is required for this tokenizer")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{arg}={str(path)!r} does not exist")
    return p


def gpt2_tokenizer(vocab_file: str | Path, merges_file: str | Path) -> Tokenizer:
    """GPT-2's byte-level BPE from its ``vocab.json`` and ``merges.txt``."""
    vocab, merges = _file(vocab_file, "vocab_file"), _file(merges_file, "merges_file")
    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if tok.token_to_id(EOT) is not None:
        tok.add_special_tokens([EOT])
    return tok


def train_bpe(texts: Iterable[str], vocab_size: int, save_path: str | Path | None = None) -> Tokenizer:
    """Train a byte-level BPE with ``vocab_size`` tokens (``<|endoftext|>`` is id 0)."""
    if vocab_size < MIN_BPE_VOCAB:
        raise ValueError(f"vocab_size={vocab_size} is too small for byte-level BPE; use at least "
                         f"{MIN_BPE_VOCAB}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return _save(tok, save_path) if save_path else tok


def _wordpiece_pipeline(tok: Tokenizer, lowercase: bool) -> Tokenizer:
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return tok


def train_wordpiece(texts: Iterable[str], vocab_size: int, save_path: str | Path | None = None,
                    lowercase: bool = True) -> Tokenizer:
    """Train BERT's WordPiece (special tokens first: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4)."""
    tok = _wordpiece_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]")), lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2,
                                        special_tokens=list(BERT_SPECIALS), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return _save(tok, save_path) if save_path else tok


def wordpiece_from_vocab(vocab_file: str | Path, lowercase: bool = True) -> Tokenizer:
    """BERT's WordPiece from a ``vocab.txt`` (one token per line, as Google's BERT releases ship it)."""
    path = _file(vocab_file, "tokenizer_file")
    tok = _wordpiece_pipeline(Tokenizer(models.WordPiece.from_file(str(path), unk_token="[UNK]")), lowercase)
    missing = [t for t in BERT_SPECIALS if tok.token_to_id(t) is None]
    if missing:
        raise ValueError(f"{path} lacks the special tokens {missing}")
    tok.add_special_tokens(list(BERT_SPECIALS))
    return tok


def special_ids(tok: Tokenizer) -> dict[str, int]:
    """{token: id} for the special tokens this tokenizer has (EOT and/or BERT's)."""
    return {t: i for t in (EOT, *BERT_SPECIALS) if (i := tok.token_to_id(t)) is not None}


def build_tokenizer(kind: str = "bpe", *, vocab_size: int = 8192, tokenizer_file: str | None = None,
                    vocab_file: str | None = None, merges_file: str | None = None,
                    texts: Callable[[], Iterator[str]] | None = None, cache_dir: str | Path | None = None,
                    cache_name: str = "corpus", lowercase: bool = True) -> Tokenizer:
    """Build or load a tokenizer (see the module docstring for ``kind``).

    Trained tokenizers (``bpe``, ``wordpiece`` without ``tokenizer_file``) need ``texts`` (a callable
    returning an iterator of training texts, only called when training) and are cached as
    ``<cache_dir>/tokenizers/<kind>-<vocab_size>-<cache_name>.json``; a cached file is loaded, not retrained.
    """
    if kind not in KINDS:
        raise ValueError(f"tokenizer={kind!r} is not known; use one of {KINDS}")
    if kind == "file":
        return Tokenizer.from_file(str(_file(tokenizer_file, "tokenizer_file")))
    if kind == "gpt2":
        if vocab_file is None and merges_file is None:
            if cache_dir is None:
                raise ValueError("tokenizer=gpt2 needs vocab_file and merges_file, or cache_dir to fetch them")
            from fa_train.data.corpus import fetch_gpt2_bpe
            vocab_file, merges_file = fetch_gpt2_bpe(cache_dir)
        return gpt2_tokenizer(vocab_file, merges_file)
    if kind == "wordpiece" and tokenizer_file is not None:
        path = _file(tokenizer_file, "tokenizer_file")
        return Tokenizer.from_file(str(path)) if path.suffix == ".json" else wordpiece_from_vocab(path, lowercase)
    if kind == "bpe" and tokenizer_file is not None:
        return Tokenizer.from_file(str(_file(tokenizer_file, "tokenizer_file")))
    save = Path(cache_dir) / "tokenizers" / f"{kind}-{vocab_size}-{cache_name}.json" if cache_dir else None
    if save is not None and save.is_file():
        return Tokenizer.from_file(str(save))
    if texts is None:
        raise ValueError(f"tokenizer={kind!r} must be trained and needs training texts")
    train = train_bpe if kind == "bpe" else train_wordpiece
    return train(texts(), vocab_size, save) if kind == "bpe" else train(texts(), vocab_size, save, lowercase)
