"""Token statistics of a tokenized corpus and its pack (compressed memmaps, checked on restore)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fa_train.data import cli, corpus, corpus_tokens
from fa_train.data.lm import LMDataModule
from tests.fa_train.data.conftest import FRACTIONS, fake_document


def test_document_lengths_and_summary():
    lengths = corpus_tokens.document_lengths(np.array([5, 6, 9, 7, 9, 9, 1, 2, 3, 9]), eot_id=9)
    assert lengths.tolist() == [2, 1, 0, 3]
    s = corpus_tokens.length_summary(np.array([1000, 3000, 5000, 1000]))
    assert s["documents"] == 4 and s["tokens"] == 10000 and s["max"] == 5000 and s["mean"] == 2500.0
    assert s["percentiles"]["p50"] == 2000
    assert s["at_least"]["2048"] == {"documents": 2, "token_share": 0.8}
    assert s["at_least"]["8192"] == {"documents": 0, "token_share": 0.0}


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """A two-source corpus written by the corpus writer and tokenized by LMDataModule (bpe, 300)."""
    import random

    root = tmp_path_factory.mktemp("tok")
    rng = random.Random(1)
    docs = [corpus.Document(f"{src}/{i}", fake_document(rng, rng.randint(2, 20)), src)
            for src in ("a", "b") for i in range(20)]
    files = corpus.write_corpus(docs, root / "corpus", {"test": 1}, FRACTIONS)
    dm = LMDataModule(source="json", data_files={s: str(p) for s, p in files.items()}, vocab_size=300, seq_len=8,
                      cache_dir=str(root / "cache"))
    dm.setup()
    return files, dm, docs, root


def test_token_stats_count_each_source_and_document(tokenized):
    files, dm, docs, _ = tokenized
    stats = corpus_tokens.token_stats(files, dm.data_dir)
    tok = dm.tokenizer()
    expected = {src: sum(len(tok.encode(d.text).ids) for d in docs if d.source == src) for src in ("a", "b")}
    assert {s: v["tokens"] for s, v in stats["sources"].items()} == expected
    assert {s: v["documents"] for s, v in stats["sources"].items()} == {"a": 20, "b": 20}
    assert stats["document_length"]["tokens"] + 40 == sum(dm.num_tokens.values())  # + one EOT per document
    assert sum(v["tokens"] for v in stats["splits"].values()) == stats["document_length"]["tokens"]


def test_token_stats_refuse_a_foreign_token_cache(tokenized, tmp_path):
    files, dm, _, _ = tokenized
    fewer = dict(files, train=tmp_path / "train.jsonl")
    fewer["train"].write_text("".join(files["train"].read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(ValueError, match="does not belong to this corpus"):
        corpus_tokens.token_stats(fewer, dm.data_dir)


def test_pack_restores_the_same_cache_and_rejects_a_corrupt_one(tokenized, tmp_path):
    files, dm, _, root = tokenized
    info = corpus_tokens.pack(dm.data_dir, files["train"].parent / "manifest.json", tmp_path / "pack")
    assert info["lm_dir"] == dm.data_dir.name and (tmp_path / "pack" / "train.bin.xz").is_file()
    assert sorted(p.name for p in (tmp_path / "pack").iterdir()) == [
        "manifest.json", "meta.json", "pack.json", "test.bin.xz", "tokenizer.json.xz", "train.bin.xz",
        "validation.bin.xz"]
    restored = corpus_tokens.unpack(tmp_path / "pack", tmp_path / "cache")
    again = LMDataModule(source="json", data_files={s: str(p) for s, p in files.items()}, vocab_size=300, seq_len=8,
                         cache_dir=str(tmp_path / "cache"))
    assert again.data_dir == restored
    again.setup()
    assert again.cache_hit and again.num_tokens == dm.num_tokens
    assert np.array_equal(np.fromfile(restored / "train.bin", dtype=np.uint16),
                          np.fromfile(dm.data_dir / "train.bin", dtype=np.uint16))
    stamp = (restored / "train.bin").stat().st_mtime_ns
    assert corpus_tokens.unpack(tmp_path / "pack", tmp_path / "cache") == restored  # intact: kept
    assert (restored / "train.bin").stat().st_mtime_ns == stamp
    xz = tmp_path / "pack" / "validation.bin.xz"
    good = xz.read_bytes()
    xz.write_bytes(good[:len(good) // 2])  # truncated in transit
    with pytest.raises(ValueError, match="cannot read validation.bin.xz.*the pack is corrupt"):
        corpus_tokens.unpack(tmp_path / "pack", tmp_path / "other")
    xz.write_bytes(good)
    pack_info = json.loads((tmp_path / "pack" / "pack.json").read_text())
    pack_info["files"]["test.bin"]["sha256"] = "0" * 64
    (tmp_path / "pack" / "pack.json").write_text(json.dumps(pack_info))
    with pytest.raises(ValueError, match="test.bin does not match its checksum"):
        corpus_tokens.unpack(tmp_path / "pack", tmp_path / "other")
    assert not (tmp_path / "other" / "lm" / dm.data_dir.name / "meta.json").exists()
    with pytest.raises(ValueError, match="not a corpus pack"):
        corpus_tokens.unpack(tmp_path, tmp_path / "other")



def test_a_pack_with_a_plain_tokenizer_restores_too(tokenized, tmp_path):
    """Packs made before the tokenizer was compressed hold tokenizer.json as it is."""
    files, dm, _, _ = tokenized
    pack = tmp_path / "pack"
    corpus_tokens.pack(dm.data_dir, files["train"].parent / "manifest.json", pack)
    (pack / "tokenizer.json.xz").unlink()
    shutil.copyfile(dm.data_dir / "tokenizer.json", pack / "tokenizer.json")
    restored = corpus_tokens.unpack(pack, tmp_path / "cache")
    assert (restored / "tokenizer.json").read_bytes() == (dm.data_dir / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["--num-proc", "0"], "--num-proc=0 is invalid: expected an integer >= 1"),
    (["--seq-len", "-1"], "--seq-len=-1 is invalid: expected an integer >= 1"),
    (["--vocab-size", "0"], "--vocab-size=0 is invalid: expected an integer >= 1")])
def test_corpus_command_rejects_bad_numbers(tmp_path, capsys, argv, message):
    assert cli.main(["corpus", "--cache-dir", str(tmp_path), *argv]) == 1
    assert message in capsys.readouterr().out
