"""MLM: masking statistics, special tokens, cu_seqlens, sentence pairs and NSP labels, the DataModule."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fa_train.data.mlm import MLMCollator, MLMDataModule, build_pairs, split_segments

PAD, UNK, CLS, SEP, MASK = range(5)


def _examples(n=64, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b = rng.integers(5, 1000, rng.integers(10, 60)), rng.integers(5, 1000, rng.integers(0, 60))
        ids = [CLS, *a, SEP] + ([*b, SEP] if len(b) else [])
        out.append({"input_ids": ids, "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1 if len(b) else 0),
                    "next_sentence_label": i % 2, "index": i})
    return out


def test_masking_statistics_and_special_tokens():
    examples = _examples()
    collate = MLMCollator(1000, PAD, MASK, [PAD, UNK, CLS, SEP, MASK], generator=torch.Generator().manual_seed(0))
    orig = collate(examples)  # masking with p=0 gives the unmasked ids back
    collate.p = 0.0
    plain = collate(examples)["input_ids"]
    collate.p = 0.15
    batch = collate(examples)
    ids, labels, am = batch["input_ids"], batch["labels"], batch["attention_mask"]
    special = torch.isin(plain, torch.tensor([PAD, CLS, SEP]))
    candidates = am & ~special
    chosen = labels != -100
    assert orig["input_ids"].shape == ids.shape
    assert int(candidates.sum()) > 3000
    assert not (chosen & ~candidates).any()                        # specials and padding never chosen
    assert torch.equal(ids[special], plain[special])               # ... nor changed
    assert torch.equal(labels[chosen], plain[chosen])
    assert abs(chosen.sum().item() / candidates.sum().item() - 0.15) < 0.02
    n = chosen.sum().item()
    masked = (ids == MASK) & chosen
    kept = (ids == plain) & chosen
    replaced = chosen & ~masked & ~kept
    assert abs(masked.sum().item() / n - 0.8) < 0.05
    assert abs(replaced.sum().item() / n - 0.1) < 0.04 and abs(kept.sum().item() / n - 0.1) < 0.04
    assert not torch.isin(ids[replaced], torch.tensor([PAD, UNK, CLS, SEP, MASK])).any()
    assert torch.equal(ids[~chosen], plain[~chosen])


def test_positions_of_masked_and_real_tokens():
    batch = MLMCollator(1000, PAD, MASK, [PAD, UNK, CLS, SEP, MASK], seed=3)(_examples(8))
    labels, positions = batch["labels"], batch["mlm_positions"]
    assert positions.dtype == torch.int64 and len(positions) > 0
    assert torch.equal(positions, (labels.flatten() != -100).nonzero().squeeze(1))
    tokens = batch["token_positions"]
    assert torch.equal(tokens, batch["attention_mask"].flatten().nonzero().squeeze(1))
    assert len(tokens) == batch["cu_seqlens"][-1]


def test_padding_attention_mask_and_cu_seqlens():
    examples = _examples(8)
    batch = MLMCollator(1000, PAD, MASK, [PAD, UNK, CLS, SEP, MASK], pad_to_multiple_of=8)(examples)
    lens = torch.tensor([len(e["input_ids"]) for e in examples])
    am = batch["attention_mask"]
    assert am.dtype == torch.bool and batch["input_ids"].shape[1] % 8 == 0
    assert torch.equal(am.sum(1), lens)
    cu = batch["cu_seqlens"]
    assert cu.dtype == torch.int32 and cu.shape == (9,) and cu[0] == 0
    assert torch.equal(cu.diff().long(), lens) and cu[-1] == am.sum()
    assert batch["max_seqlen"] == int(lens.max()) and isinstance(batch["max_seqlen"], int)
    assert (batch["input_ids"][~am] == PAD).all() and (batch["token_type_ids"][~am] == 0).all()
    assert torch.equal(batch["next_sentence_label"], torch.tensor([i % 2 for i in range(8)]))


def test_eval_masks_depend_only_on_the_examples():
    examples = _examples(4)
    c = MLMCollator(1000, PAD, MASK, [PAD, UNK, CLS, SEP, MASK], seed=5)
    assert torch.equal(c(examples)["input_ids"], c(examples)["input_ids"])


def test_pairs_and_next_sentence_labels():
    rng = np.random.default_rng(0)
    seg_lens = rng.integers(3, 20, 2000)
    doc_nsegs = np.full(100, 20)
    pairs = build_pairs(seg_lens, doc_nsegs, 64, np.random.default_rng(1), nsp=True)
    doc_of = np.repeat(np.arange(100), 20)[np.searchsorted(np.cumsum(seg_lens), pairs[:, [0, 2]], side="right")]
    a_len, b_len, label = pairs[:, 1] - pairs[:, 0], pairs[:, 3] - pairs[:, 2], pairs[:, 4]
    assert len(pairs) > 300 and (a_len >= 1).all() and (b_len >= 1).all() and (a_len + b_len <= 61).all()
    assert 0.35 < label.mean() < 0.65
    nxt = label == 0
    assert (doc_of[nxt, 0] == doc_of[nxt, 1]).all() and (pairs[nxt, 2] >= pairs[nxt, 1]).all()
    assert (doc_of[~nxt, 0] != doc_of[~nxt, 1]).all()  # random B comes from another document
    single = build_pairs(seg_lens, doc_nsegs, 64, np.random.default_rng(1), nsp=False)
    assert (single[:, 4] == 0).all()
    assert np.array_equal(pairs, build_pairs(seg_lens, doc_nsegs, 64, np.random.default_rng(1), nsp=True))


def test_split_segments():
    assert split_segments("Title\n=====\n\nOne two. Three four!\n  Five\n\n\n") == \
        ["Title =====", "One two.", "Three four!", "Five"]


def test_mlm_datamodule_end_to_end(tiny_corpus, tmp_path, monkeypatch):
    files = {s: str(p) for s, p in tiny_corpus.items()}
    dm = MLMDataModule(source="json", data_files=files, vocab_size=200, seq_len=32, batch_size=8,
                       cache_dir=str(tmp_path))
    dm.setup()
    assert dm.vocab_size <= 200 and dm.seq_len == 32 and dm.cache_hit is False
    assert min(dm.num_examples.values()) > 0
    batch = next(iter(dm.train_dataloader()))
    loader = dm.train_dataloader()
    assert torch.equal(next(iter(loader))["input_ids"], batch["input_ids"])  # masks are reproducible
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))["input_ids"], batch["input_ids"])
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels",
                          "mlm_positions", "token_positions", "cu_seqlens", "max_seqlen",
                          "next_sentence_label"}
    assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].shape[1] <= 32
    assert (batch["input_ids"][:, 0] == dm.cls_id).all()
    assert (batch["labels"] != -100).any()
    v1 = [b["input_ids"] for b in dm.val_dataloader()]
    v2 = [b["input_ids"] for b in dm.val_dataloader()]
    assert all(torch.equal(a, b) for a, b in zip(v1, v2))  # evaluation masks are fixed
    import fa_train.data.lm as lm
    monkeypatch.setattr(lm, "load_text_splits", lambda *a, **k: pytest.fail("re-tokenized"))
    again = MLMDataModule(source="json", data_files=files, vocab_size=200, max_seq_len=32, cache_dir=str(tmp_path))
    again.setup()
    assert again.cache_hit is True and again.seq_len == 32
    with pytest.raises(ValueError, match="MLM needs BERT's special tokens"):
        MLMDataModule(tokenizer="bpe")
