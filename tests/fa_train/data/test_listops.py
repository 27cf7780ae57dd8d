"""ListOps: generator, evaluator, string format, tokenizer, TSV I/O, CLI, DataModule."""
import argparse
import random

import numpy as np
import pytest

from fa_train.data.lra import listops as lo


def _depth_and_args(tree, depth=1):
    if isinstance(tree, int):
        return depth, []
    sub = [_depth_and_args(c, depth + 1) for c in tree[1:]]
    return max(d for d, _ in sub), [len(tree) - 1] + [a for _, al in sub for a in al]


def test_tree_shape_follows_the_lra_generator():
    rng = random.Random(0)
    for _ in range(300):
        tree, length = lo.generate_tree(rng)
        depth, nargs = _depth_and_args(tree)
        assert depth <= lo.MAX_DEPTH
        assert all(2 <= a <= 10 for a in nargs)
        assert length == len(lo.tokens_of(lo.to_string(tree)))


def test_evaluator_and_string_format():
    tree = ["[MAX", 2, 9]
    assert lo.to_string(tree) == "( ( ( [MAX 2 ) 9 ) ] )"
    assert lo.tokens_of(lo.to_string(tree)) == ["[MAX", "2", "9", "]"]
    cases = {
        "[MIN 3 1 4 ]": 1, "[MAX 3 1 4 ]": 4, "[MED 1 2 ]": 1, "[MED 1 2 3 4 ]": 2,
        "[MED 5 1 9 ]": 5, "[SM 9 8 7 ]": 4, "[MAX 2 [MIN 7 3 ] [SM 5 6 ] ]": 3,
    }
    for src, val in cases.items():
        assert lo.evaluate_tokens(src.split()) == val
    nested = ["[SM", ["[MED", 1, 2, 3, 4], ["[MIN", 7, 3], 9]
    assert lo.evaluate(nested) == (2 + 3 + 9) % 10
    assert lo.evaluate_tokens(lo.tokens_of(lo.to_string(nested))) == lo.evaluate(nested)
    ids = lo.encode("( ( ( [MAX 2 ) 9 ) ] )")
    assert ids.tolist() == [lo.TOKEN_TO_ID[t] for t in ("[MAX", "2", "9", "]")]
    assert lo.VOCAB_SIZE == 16 and lo.PAD_ID == 0 and 0 not in ids
    with pytest.raises(ValueError, match="unknown ListOps token"):
        lo.encode("[FIRST 1 2 ]")


def test_generation_filters_dedups_and_is_deterministic():
    rows = lo.generate_listops(40, seed=3)
    assert len({s for s, _ in rows}) == 40
    for src, label in rows:
        toks = lo.tokens_of(src)
        assert 500 < len(toks) < 2000
        assert lo.evaluate_tokens(toks) == label
    assert rows == lo.generate_listops(40, seed=3)
    assert rows != lo.generate_listops(40, seed=4)
    # small bounds: plenty of short trees, all distinct
    short = lo.generate_listops(30, seed=0, min_length=3, max_length=40)
    assert len({s for s, _ in short}) == 30


def test_generation_is_independent_of_workers():
    a = lo.generate_listops(24, seed=5, chunk_size=8)
    b = lo.generate_listops(24, seed=5, workers=2, chunk_size=8)
    assert a == b


def test_tsv_round_trip_and_released_format(tmp_path):
    rows = [("( ( ( [MAX 2 ) 9 ) ] )", 9), ("( ( ( [SM 4 ) 8 ) ] )", 2)]
    f = lo.write_tsv(tmp_path / "basic_test.tsv", rows)
    assert f.read_text().splitlines()[0] == "Source\tTarget"
    assert lo.read_tsv(f) == rows
    # a released-style file (the header, one long expression per line)
    released = tmp_path / "rel.tsv"
    released.write_text("Source\tTarget\n( ( ( ( [MIN 4 ) ( ( ( [MAX 2 ) 9 ) ] ) ) 8 ) ] )\t4\n")
    (src, label), = lo.read_tsv(released)
    assert lo.evaluate_tokens(lo.tokens_of(src)) == label == 4
    with pytest.raises(FileNotFoundError, match="basic_train.tsv"):
        lo.read_tsv(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n")
    with pytest.raises(ValueError, match="Source"):
        lo.read_tsv(bad)
    with pytest.raises(FileNotFoundError, match="basic_val.tsv"):
        lo.find_split_files(tmp_path / "nowhere")


def test_cli_writes_three_splits(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="fa-data")
    lo.register_cli(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["listops", "--out", str(tmp_path), "--n-train", "12", "--n-val", "3",
                              "--n-test", "3", "--seed", "1", "--no-progress"])
    assert args.func(args) == 0
    files = lo.find_split_files(tmp_path)
    sizes = [len(lo.read_tsv(files[k])) for k in ("train", "val", "test")]
    assert sizes == [12, 3, 3]
    all_src = [s for k in files for s, _ in lo.read_tsv(files[k])]
    assert len(set(all_src)) == 18
    assert "label_counts" in capsys.readouterr().out


def test_datamodule_generates_into_cache(tmp_path):
    from fa_train.data.lra import ListOpsDataModule

    dm = ListOpsDataModule(cache_dir=str(tmp_path), n_train=10, n_val=4, n_test=4, batch_size=4)
    dm.setup()
    assert (dm.vocab_size, dm.seq_len, dm.num_classes) == (16, 2000, 10)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 2000)
    assert str(batch["input_ids"].dtype) == "torch.int64" and str(batch["attention_mask"].dtype) == "torch.bool"
    assert batch["labels"].shape == (4,) and int(batch["labels"].max()) < 10
    lengths = batch["attention_mask"].sum(1)
    assert bool(((lengths > 500) & (lengths < 2000)).all())
    assert bool((batch["input_ids"][~batch["attention_mask"]] == 0).all())
    assert len(dm.datasets["val"]) == 4 and len(dm.datasets["test"]) == 4
    # a second module with the same key reuses the cache; a released-data dir is read as is
    dm2 = ListOpsDataModule(data_dir=str(dm._generated_dir()), n_train=3, batch_size=2)
    dm2.setup()
    assert len(dm2.datasets["train"]) == 3
    with pytest.raises(FileNotFoundError, match="basic_train.tsv"):
        ListOpsDataModule(data_dir=str(tmp_path / "none")).setup()
