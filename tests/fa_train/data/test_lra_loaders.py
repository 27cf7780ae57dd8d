"""LRA Text / Retrieval / Image loaders and the LRA DataModules, on tiny fixtures in the real formats."""
import os
import pickle
import re

import numpy as np
import pytest
import torch

from fa_train.data.lra import (ImageDataModule, ListOpsDataModule, PathfinderDataModule,
                               RetrievalDataModule, TextDataModule)
from fa_train.data.lra import image as image_mod
from fa_train.data.lra import pathfinder as pf
from fa_train.data.lra import retrieval as retrieval_mod
from fa_train.data.lra import text as text_mod
from fa_train.errors import UserError


def _check_batch(batch, b, length, towers=1):
    shape = (b, length) if towers == 1 else (b, towers, length)
    assert batch["input_ids"].shape == shape and batch["input_ids"].dtype == torch.int64
    mask = batch["attention_mask"]
    assert mask is None or (mask.shape == shape and mask.dtype == torch.bool)
    assert batch["labels"].shape == (b,) and batch["labels"].dtype == torch.int64


@pytest.fixture
def imdb(tmp_path):
    root = tmp_path / "aclImdb"
    reviews = {"pos": ["Great film!", "Loved it, é."], "neg": ["Awful.", "Boring and long " * 10]}
    for split in ("train", "test"):
        for cls, texts in reviews.items():
            d = root / split / cls
            d.mkdir(parents=True)
            for i, t in enumerate(texts):
                (d / f"{i}_{7 if cls == 'pos' else 2}.txt").write_text(t, encoding="utf-8")
    return root


def test_imdb_loader_and_datamodule(imdb):
    data = text_mod.load_imdb(imdb.parent)  # the parent of aclImdb/ works too
    texts, labels = data["train"]
    assert labels.tolist() == [0, 0, 1, 1] and texts[2] == "Great film!"
    ids = text_mod.encode_bytes("Loved it, é.")
    assert ids.min() >= 1 and ids.max() <= 256 and len(ids) == len("Loved it, é.".encode())
    dm = TextDataModule(data_dir=str(imdb), max_length=64, batch_size=4)
    dm.setup()
    assert (dm.vocab_size, dm.seq_len, dm.num_classes) == (257, 64, 2)
    batch = next(iter(dm.val_dataloader()))
    _check_batch(batch, 4, 64)
    assert batch["attention_mask"][0].sum() == len("Awful.")
    assert batch["input_ids"][1].tolist()[:6] == [b + 1 for b in b"Boring"]


def test_imdb_missing_names_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"aclImdb.*train,test.*pos,neg"):
        text_mod.load_imdb(tmp_path)
    with pytest.raises(FileNotFoundError, match="aclImdb"):
        TextDataModule(data_dir=str(tmp_path)).setup()


def test_aan_loader_and_two_tower_batches(tmp_path):
    rows = {"train": [(1, "a", "b", "paper one text", "paper two"), (0, "c", "d", "x", "y z")],
            "eval": [(0.0, "e", "f", "hello", "world")], "test": [(1, "g", "h", "t1", "t2")]}
    for split, rs in rows.items():
        lines = ["label\tid1\tid2\ttext1\ttext2"] if split == "train" else []
        lines += ["\t".join(map(str, r)) for r in rs]
        (tmp_path / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")
    data = retrieval_mod.load_aan(tmp_path)
    t1, t2, labels = data["train"]
    assert t1 == ["paper one text", "x"] and t2 == ["paper two", "y z"] and labels.tolist() == [1, 0]
    assert data["val"][2].tolist() == [0]
    dm = RetrievalDataModule(data_dir=str(tmp_path), max_length=8, batch_size=2)
    dm.setup()
    assert dm.num_towers == 2 and (dm.vocab_size, dm.seq_len, dm.num_classes) == (257, 8, 2)
    batch = next(iter(dm.test_dataloader()))
    _check_batch(batch, 1, 8, towers=2)
    assert batch["attention_mask"][0].sum(-1).tolist() == [2, 2]
    with pytest.raises(FileNotFoundError, match=r"new_aan_pairs\.\{train,eval,test\}\.tsv"):
        retrieval_mod.load_aan(tmp_path / "nothing")
    bad = tmp_path / "bad"
    bad.mkdir()
    for s in ("train", "eval", "test"):
        (bad / f"new_aan_pairs.{s}.tsv").write_text("1\tonly\tthree\n")
    with pytest.raises(ValueError, match="5 tab-separated"):
        retrieval_mod.load_aan(bad)


def test_cifar_loader_grayscale_split(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in [*image_mod.TRAIN_FILES, image_mod.TEST_FILE]:
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": list(rng.integers(0, 10, 4))}, f)
    d = image_mod.load_cifar10_gray(tmp_path, n_val=4)
    assert [len(d[k][1]) for k in ("train", "val", "test")] == [16, 4, 4]
    x = d["train"][0]
    assert x.dtype == np.uint8 and x.shape == (16, 32, 32)
    with open(root / "data_batch_1", "rb") as f:
        raw = pickle.load(f)[b"data"].reshape(-1, 3, 32, 32).astype(np.float64)
    want = np.rint(0.2989 * raw[:, 0] + 0.5870 * raw[:, 1] + 0.1140 * raw[:, 2])
    assert np.abs(x[:4].astype(np.float64) - want).max() <= 1
    dm = ImageDataModule(data_dir=str(root), n_val=4, batch_size=3)
    dm.setup()
    assert (dm.vocab_size, dm.seq_len, dm.num_classes) == (256, 1024, 10)
    batch = next(iter(dm.train_dataloader()))
    _check_batch(batch, 3, 1024)
    assert batch["attention_mask"] is None and int(batch["input_ids"].max()) <= 255
    with pytest.raises(FileNotFoundError, match="data_batch_1..5"):
        image_mod.load_cifar10_gray(tmp_path / "nope")


def test_pathfinder_datamodule_generates_and_reads(tmp_path, capsys):
    dm = PathfinderDataModule(resolution=32, cache_dir=str(tmp_path), n_train=8, n_val=2, n_test=2,
                              batch_size=4, gen_seed=1)
    dm.setup()
    assert re.search(r"generated 12 Pathfinder-32 images in [0-9.]+ s \([0-9]+/s, gen_workers=1\)",
                     capsys.readouterr().out)
    PathfinderDataModule(resolution=32, cache_dir=str(tmp_path), n_train=8, n_val=2, n_test=2,
                         gen_seed=1).setup()
    assert "generated" not in capsys.readouterr().out   # the second reads the cache
    assert (dm.vocab_size, dm.seq_len, dm.num_classes) == (256, 1024, 2)
    assert [len(dm.datasets[k]) for k in ("train", "val", "test")] == [8, 2, 2]
    batch = next(iter(dm.train_dataloader()))
    _check_batch(batch, 4, 1024)
    assert int(batch["input_ids"].max()) == 255 and batch["attention_mask"] is None
    # pixels are the generator's images, row-major
    idx = dm.datasets["test"].index[0]
    img, label = pf.generate_image(pf.pathfinder_params(32), 1, int(idx))
    tb = next(iter(dm.test_dataloader()))
    assert tb["input_ids"][0].tolist() == img.reshape(-1).tolist() and int(tb["labels"][0]) == label
    # a generated/released directory is split 80/10/10
    pf.generate_pathfinder(tmp_path / "rel", 32, "hard", 20, seed=2, fmt="png", progress=False)
    dm2 = PathfinderDataModule(resolution=32, data_dir=str(tmp_path / "rel"), batch_size=2)
    dm2.setup()
    assert [len(dm2.datasets[k]) for k in ("train", "val", "test")] == [16, 2, 2]
    with pytest.raises(FileNotFoundError, match="curv_contour_length"):
        PathfinderDataModule(resolution=64, data_dir=str(tmp_path / "rel")).setup()


def test_gen_workers_zero_means_every_core():
    cores = len(os.sched_getaffinity(0))
    assert PathfinderDataModule(gen_workers=0).gen_workers == cores
    assert ListOpsDataModule(gen_workers=0).gen_workers == cores
    assert PathfinderDataModule(gen_workers=3).gen_workers == 3
    with pytest.raises(UserError, match=r"data.gen_workers must be >= 0"):
        PathfinderDataModule(gen_workers=-1)


def test_collator_sends_no_mask_when_nothing_is_padding():
    """The host knows whether a batch holds padding; a mask of all real tokens would make the
    model ask the GPU (a sync every step) or run a masked kernel for nothing."""
    from fa_train.data.lra.base import Collator
    full = [(np.arange(1, 5), 0), (np.arange(2, 6), 1)]
    batch = Collator(4)(full)
    assert batch["attention_mask"] is None and batch["input_ids"].tolist()[1] == [2, 3, 4, 5]
    padded = Collator(4)([(np.arange(1, 5), 0), (np.arange(1, 3), 1)])
    assert padded["attention_mask"].tolist() == [[True] * 4, [True, True, False, False]]
    towers = Collator(3, num_towers=2)
    assert towers([((np.ones(3), np.ones(3)), 0)])["attention_mask"] is None
    assert towers([((np.ones(3), np.ones(2)), 0)])["attention_mask"].shape == (1, 2, 3)
