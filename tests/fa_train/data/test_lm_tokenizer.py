"""Tokenizers: train/save/load round trips, GPT-2 files, WordPiece vocab.txt, errors."""
from __future__ import annotations

import json

import pytest

from fa_train.data.tokenizer import BERT_SPECIALS, EOT, build_tokenizer, gpt2_tokenizer, train_bpe

TEXTS = ["The function returns a value.", "A module object holds a list of strings.",
         "Each class method calls another function."] * 20


def test_bpe_train_save_load_round_trip(tmp_path):
    tok = build_tokenizer("bpe", vocab_size=300, texts=lambda: iter(TEXTS), cache_dir=tmp_path, cache_name="t")
    saved = tmp_path / "tokenizers" / "bpe-300-t.json"
    assert saved.is_file() and tok.get_vocab_size() <= 300 and tok.token_to_id(EOT) == 0
    text = "Unseen wörds, ünïcode & spaces  kept.\n"
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text  # byte-level: lossless
    # second build comes from the cache (texts is never called), and "file" loads the same JSON
    again = build_tokenizer("bpe", vocab_size=300, texts=lambda: pytest.fail("retrained"), cache_dir=tmp_path,
                            cache_name="t")
    loaded = build_tokenizer("file", tokenizer_file=str(saved))
    assert again.encode(text).ids == ids == loaded.encode(text).ids


def test_gpt2_from_tiny_vocab_and_merges(tmp_path):
    vocab = {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9, "hell": 10,
             "hello": 11, "Ġw": 12, EOT: 13}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ w\n")
    tok = build_tokenizer("gpt2", vocab_file=str(tmp_path / "vocab.json"), merges_file=str(tmp_path / "merges.txt"))
    assert tok.encode("hello world").ids == [11, 12, 3, 6, 2, 7]
    assert tok.encode(f"hello{EOT}").ids == [11, 13]  # the end-of-text token is special
    assert tok.decode([11, 12, 3, 6, 2, 7]) == "hello world"
    assert gpt2_tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt").get_vocab_size() == 14


def test_wordpiece_train_and_vocab_txt(tmp_path):
    tok = build_tokenizer("wordpiece", vocab_size=200, texts=lambda: iter(TEXTS), cache_dir=tmp_path)
    assert [tok.token_to_id(t) for t in BERT_SPECIALS] == [0, 1, 2, 3, 4]
    ids = tok.encode("The FUNCTION returns.", add_special_tokens=False).ids
    assert tok.decode(ids) == "the function returns."  # uncased
    vocab_txt = tmp_path / "vocab.txt"
    vocab_txt.write_text("\n".join(sorted(tok.get_vocab(), key=tok.get_vocab().get)) + "\n")
    from_txt = build_tokenizer("wordpiece", tokenizer_file=str(vocab_txt))
    assert from_txt.encode("The FUNCTION returns.", add_special_tokens=False).ids == ids
    vocab_txt.write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        build_tokenizer("wordpiece", tokenizer_file=str(vocab_txt))


def test_tokenizer_errors(tmp_path):
    with pytest.raises(ValueError, match="tokenizer='sentencepiece' is not known"):
        build_tokenizer("sentencepiece")
    with pytest.raises(FileNotFoundError, match="tokenizer_file='nope.json' does not exist"):
        build_tokenizer("file", tokenizer_file="nope.json")
    with pytest.raises(ValueError, match="tokenizer_file is required"):
        build_tokenizer("file")
    with pytest.raises(ValueError, match="vocab_file and merges_file"):
        build_tokenizer("gpt2")
    with pytest.raises(ValueError, match="needs training texts"):
        build_tokenizer("bpe", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="too small"):
        train_bpe(TEXTS, 100)
