"""LMDataModule: memmap cache and reuse, dtype, windows, splits, errors, deterministic resumable sampling."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import fa_train.data.lm as lm
from fa_train.data.lm import EpochSampler, LMDataModule, token_dtype


def _dm(tiny_corpus, cache_dir, **kw):
    files = {s: str(p) for s, p in tiny_corpus.items()}
    args = dict(source="json", data_files=files, tokenizer="bpe", vocab_size=300, seq_len=16, batch_size=4,
                cache_dir=str(cache_dir), seed=7)
    return LMDataModule(**{**args, **kw})


@pytest.fixture(scope="module")
def prepared(tiny_corpus, tmp_path_factory):
    cache = tmp_path_factory.mktemp("lmcache")
    dm = _dm(tiny_corpus, cache)
    dm.prepare_data()
    dm.setup()
    return dm, cache


def test_memmaps_are_cached_and_reused(prepared, tiny_corpus, monkeypatch, capsys):
    dm, cache = prepared
    assert dm.cache_hit is False and dm.vocab_size <= 300 and dm.seq_len == 16
    meta = json.loads((dm.data_dir / "meta.json").read_text())
    for split in lm.SPLITS:
        n = meta["num_tokens"][split]
        assert n == dm.num_tokens[split] > 0
        assert (dm.data_dir / f"{split}.bin").stat().st_size == n * 2  # uint16
    # a new module with the same data (another seq_len too) reuses the memmaps without tokenizing
    monkeypatch.setattr(lm, "load_text_splits", lambda *a, **k: pytest.fail("re-tokenized"))
    again = _dm(tiny_corpus, cache, seq_len=8)
    again.prepare_data()
    again.setup()
    assert again.cache_hit is True and again.data_dir == dm.data_dir
    assert "reusing tokenized" in capsys.readouterr().out
    assert _dm(tiny_corpus, cache, vocab_size=400).data_dir != dm.data_dir  # the tokenizer is in the key


def test_token_dtype():
    assert token_dtype(8192) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(50257) == np.uint16


def test_windows_shift_and_cover_eval_contiguously(prepared):
    dm, _ = prepared
    val = dm.datasets["validation"]
    data = np.memmap(dm.data_dir / "validation.bin", dtype=np.uint16, mode="r")
    assert len(val) == (dm.num_tokens["validation"] - 1) // 16
    for i in range(len(val)):
        item = val[i]
        assert item["input_ids"].shape == item["labels"].shape == (16,)
        assert item["input_ids"].dtype == torch.int64
        assert torch.equal(item["input_ids"][1:], item["labels"][:-1])
        assert item["input_ids"].tolist() == data[i * 16:(i + 1) * 16].tolist()
        if i:
            assert val[i - 1]["labels"][-1] == item["input_ids"][0]  # non-overlapping, contiguous
    batch = next(iter(dm.val_dataloader()))
    assert batch["input_ids"].shape == (4, 16) and batch["labels"].shape == (4, 16)
    assert int(batch["input_ids"].max()) < dm.vocab_size
    assert (data == dm.eot_id).sum() >= 1  # documents are joined by the end-of-text token


def test_train_windows_are_random_and_seeded(prepared):
    dm, _ = prepared
    train = dm.datasets["train"]
    starts = [train.start(g) for g in range(200)]
    assert len(set(starts)) > 100 and max(starts) <= dm.num_tokens["train"] - 17
    assert starts == [train.start(g) for g in range(200)]
    b1 = next(iter(dm.train_dataloader()))
    b2 = next(iter(dm.train_dataloader()))
    assert torch.equal(b1["input_ids"], b2["input_ids"])
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))["input_ids"], b1["input_ids"])  # a new epoch, new windows


def test_windows_per_draw_cuts_each_draw_into_consecutive_windows(prepared, tiny_corpus):
    dm, cache = prepared
    one = dm.datasets["train"]
    rng_start = lambda draw, span: int(np.random.default_rng([7, draw]).integers(
        0, dm.num_tokens["train"] - span))
    assert [one.start(g) for g in range(8)] == [rng_start(g, 16) for g in range(8)]  # k=1 as before
    dm4 = _dm(tiny_corpus, cache, windows_per_draw=4)
    dm4.setup()
    four = dm4.datasets["train"]
    starts = [four.start(g) for g in range(12)]
    for draw in range(3):
        first = rng_start(draw, 64)
        assert starts[4 * draw:4 * draw + 4] == [first, first + 16, first + 32, first + 48]
        assert first + 64 <= dm.num_tokens["train"] - 1            # the last window's labels fit
    assert len({starts[0], starts[4], starts[8]}) == 3
    batch = next(iter(dm4.train_dataloader()))                      # batch 4: one draw, 64 tokens
    assert torch.equal(batch["input_ids"][1:, 0], batch["labels"][:-1, -1])
    assert dm4.datasets["validation"].start(1) == 16                # eval windows are unchanged
    with pytest.raises(ValueError, match=r"data.windows_per_draw must divide data.batch_size \(4\)"
                                         r" so that every batch holds whole draws, got 3"):
        _dm(tiny_corpus, cache, windows_per_draw=3)
    with pytest.raises(ValueError, match=r"data.windows_per_draw=0 is invalid: expected an integer"):
        _dm(tiny_corpus, cache, windows_per_draw=0)


def test_loader_state_resumes_at_the_next_batch(prepared):
    dm, _ = prepared
    full = [b["input_ids"] for b in dm.train_dataloader()]
    first = dm.train_dataloader()
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    assert state == {"epoch": 0, "samples": 8}
    resumed = dm.train_dataloader()
    resumed.load_state_dict(state)
    rest = [b["input_ids"] for b in resumed]
    assert len(rest) == len(full) - 2 and all(torch.equal(a, b) for a, b in zip(rest, full[2:]))
    resumed.sampler.set_epoch(1)  # the skip applies only to the resumed epoch
    assert len(list(resumed)) == len(full)


def test_epoch_sampler_shuffles_per_epoch():
    s = EpochSampler(10, seed=3, shuffle=True)
    e0 = list(s)
    assert sorted(e0) == list(range(10)) and list(s) == e0
    s.set_epoch(1)
    e1 = list(s)
    assert sorted(e1) == list(range(10, 20)) and [i % 10 for i in e1] != e0
    assert list(EpochSampler(4, shuffle=False)) == [0, 1, 2, 3]


def test_val_and_test_are_split_off_train_when_missing(tiny_corpus, tmp_path):
    splits = lm.load_text_splits("json", tmp_path, data_files=str(tiny_corpus["train"]), val_fraction=0.1,
                                 test_fraction=0.1, split_seed=1)
    again = lm.load_text_splits("json", tmp_path, data_files=str(tiny_corpus["train"]), val_fraction=0.1,
                                test_fraction=0.1, split_seed=1)
    texts = {s: set(splits[s]["text"]) for s in lm.SPLITS}
    n = sum(1 for _ in open(tiny_corpus["train"]))
    assert sum(len(v) for v in texts.values()) == n and min(len(v) for v in texts.values()) >= 1
    assert not (texts["train"] & texts["validation"]) and not (texts["train"] & texts["test"])
    assert not (texts["validation"] & texts["test"])
    assert all(splits[s]["text"] == again[s]["text"] for s in lm.SPLITS)  # deterministic


def test_python_docs_source_offline(fake_python_docs, tmp_path):
    dm = LMDataModule(source="python-docs", vocab_size=300, seq_len=8, batch_size=2, cache_dir=str(tmp_path))
    dm.setup()
    assert set(dm.num_tokens) == {"train", "validation", "test"} and dm.vocab_size <= 300
    assert next(iter(dm.test_dataloader()))["input_ids"].shape == (2, 8)


def test_seq_len_longer_than_a_split_is_a_clear_error(prepared, tiny_corpus):
    dm, cache = prepared
    too_long = dm.num_tokens["validation"]
    with pytest.raises(ValueError, match=rf"seq_len={too_long} needs at least {too_long + 1} tokens"):
        _dm(tiny_corpus, cache, seq_len=too_long).setup()
    with pytest.raises(ValueError, match=r"data.seq_len=70000 is invalid: expected an integer in \[1, 65536\]"):
        _dm(tiny_corpus, cache, seq_len=70000)


def test_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="data.data_files is required for data.source='json'"):
        LMDataModule(source="json", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="data file /no/such.jsonl: not found"):
        LMDataModule(source="json", data_files="/no/such.jsonl", cache_dir=str(tmp_path))


def test_data_configs_name_a_missing_path():
    from pathlib import Path

    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    root = Path(__file__).resolve().parents[3] / "configs" / "data"
    cfg = OmegaConf.load(root / "lm_files.yaml")
    with pytest.raises(MissingMandatoryValue, match="data_files"):
        cfg.data_files
    for name, target in [("default", "LMDataModule"), ("lm_openwebtext", "LMDataModule"),
                         ("lm_files", "LMDataModule"), ("mlm_default", "MLMDataModule")]:
        cfg = OmegaConf.load(root / f"{name}.yaml")
        assert cfg._target_.endswith(target) and OmegaConf.to_container(cfg)["cache_dir"] == "${paths.cache_dir}"
    assert OmegaConf.load(root / "default.yaml").vocab_size == 8192
