"""Masked-LM data (BERT pre-training): text -> WordPiece -> sentence-pair examples -> dynamic masking.

Preparation (cached like `fa_train.data.lm`, in ``<cache_dir>/mlm/<name>-<hash>/``): every document is
cut into segments (paragraphs, then sentences), each segment is tokenized, and per split the tokens
go into one memmap plus the segment lengths and the number of segments per document.

Examples (built in ``setup``, seeded): BERT's recipe. Consecutive segments of a document are gathered
up to a target length (``max_seq_len - 3``; with probability ``short_seq_prob`` a shorter random one);
a random cut makes segment A and B. With ``nsp=True`` B is, half the time, a span from another random
document (``next_sentence_label`` 1; 0 means B really follows A, as in Hugging Face's BERT). The pair is
trimmed to fit, and laid out ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0 for A, 1 for B.

Masking happens per batch in `MLMCollator` (every epoch masks anew, reproducibly): 15% of the
non-special tokens are chosen; of those 80% become [MASK], 10% a random non-special token, 10% stay;
``labels`` hold the original ids there and -100 elsewhere, and ``mlm_positions`` lists the chosen
positions of the flattened (B, T) batch. Batches are padded to the longest sequence (rounded up to
``pad_to_multiple_of``) and carry ``attention_mask`` (bool, True = real token), plus
``token_positions`` (the real tokens' positions in the flattened batch), ``cu_seqlens`` ((B+1,)
int32, cumulative real lengths) and ``max_seqlen`` (int) for unpadded varlen attention. Positions
and lengths are found here, on the host, so that the training step never waits for the GPU to
count them.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from torch.utils.data import Dataset

from fa_train.data.lm import SPLITS, TextDataModule, _files_identity, info, iter_texts, write_memmap
from fa_train.data.spec import DataSpec
from fa_train.data.tokenizer import BERT_SPECIALS, build_tokenizer
from fa_train.errors import UserError, check_float, check_int

_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def split_segments(text: str) -> list[str]:
    """Paragraphs (blank-line separated), each cut into sentences, whitespace collapsed."""
    out = []
    for para in _PARAGRAPH.split(text):
        para = " ".join(para.split())
        out.extend(s for s in _SENTENCE.split(para) if s)
    return out


# ----------------------------------------------------------------------------- pair construction
def build_pairs(seg_lens: np.ndarray, doc_nsegs: np.ndarray, max_seq_len: int, rng: np.random.Generator,
                nsp: bool = True, short_seq_prob: float = 0.1) -> np.ndarray:
    """Sentence-pair examples as token spans of the flat token array.

    Returns int64 (N, 5): a_start, a_end, b_start, b_end, next_sentence_label (0 = B follows A,
    1 = B random; B may be empty only when ``nsp`` is False). ``a`` + ``b`` <= ``max_seq_len - 3``.
    """
    max_tokens = max_seq_len - 3
    seg_end = np.cumsum(seg_lens)
    seg_start = seg_end - seg_lens
    doc_end = np.cumsum(doc_nsegs)
    doc_start = doc_end - doc_nsegs
    docs = [d for d in range(len(doc_nsegs)) if doc_nsegs[d] > 0 and seg_lens[doc_start[d]:doc_end[d]].sum() > 0]
    out: list[tuple[int, int, int, int, int]] = []
    for d in docs:
        s0, s1 = doc_start[d], doc_end[d]
        target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
        chunk: list[int] = []
        length, i = 0, s0
        while i < s1:
            chunk.append(i)
            length += seg_lens[i]
            if i == s1 - 1 or length >= target:
                a_n = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a0, a1 = seg_start[chunk[0]], seg_end[chunk[a_n - 1]]
                label = 0
                if nsp and len(docs) > 1 and (len(chunk) == 1 or rng.random() < 0.5):
                    label = 1
                    other = d
                    while other == d:
                        other = docs[int(rng.integers(len(docs)))]
                    j = int(rng.integers(doc_start[other], doc_end[other]))
                    b0 = seg_start[j]
                    b1 = min(seg_end[doc_end[other] - 1], b0 + max(target - (a1 - a0), 1))
                    i = chunk[a_n - 1]  # the unused segments of this chunk go back into the pool
                elif len(chunk) >= 2:
                    b0, b1 = seg_start[chunk[a_n]], seg_end[chunk[-1]]
                else:
                    b0 = b1 = a1
                while (a1 - a0) + (b1 - b0) > max_tokens:  # trim the longer side, front or back at random
                    front = rng.random() < 0.5
                    if a1 - a0 > b1 - b0:
                        a0, a1 = (a0 + 1, a1) if front else (a0, a1 - 1)
                    else:
                        b0, b1 = (b0 + 1, b1) if front else (b0, b1 - 1)
                if a1 > a0 and (b1 > b0 or not nsp):
                    out.append((int(a0), int(a1), int(b0), int(b1), label))
                chunk, length = [], 0
            i += 1
    return np.asarray(out, dtype=np.int64).reshape(-1, 5)


class PairDataset(Dataset):
    """``[CLS] A [SEP] B [SEP]`` examples (B and its [SEP] left out when empty) from token spans."""

    def __init__(self, path: str | Path, dtype: str, num_tokens: int, pairs: np.ndarray, cls_id: int, sep_id: int):
        self.path, self.dtype, self.num_tokens, self.pairs = str(path), dtype, num_tokens, pairs
        self.cls_id, self.sep_id, self._data = cls_id, sep_id, None

    def __len__(self) -> int:
        return len(self.pairs)

    def __getstate__(self):
        return {**self.__dict__, "_data": None}

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._data is None:
            self._data = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(max(self.num_tokens, 1),))
        a0, a1, b0, b1, label = (int(x) for x in self.pairs[i % len(self.pairs)])  # i: an EpochSampler id
        a, b = self._data[a0:a1].astype(np.int64), self._data[b0:b1].astype(np.int64)
        ids = [self.cls_id, *a, self.sep_id] + ([*b, self.sep_id] if len(b) else [])
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1 if len(b) else 0)
        return {"input_ids": ids, "token_type_ids": types, "next_sentence_label": label, "index": i}


# ----------------------------------------------------------------------------- masking
class MLMCollator:
    """Pads a list of examples and masks it (dynamic masking: a fresh mask every batch).

    With ``seed`` set, the mask of a batch depends only on (seed, sample id of its first example):
    evaluation scores the same masked tokens every time, and training (whose `EpochSampler` ids
    differ every epoch) gets new masks each epoch that a resumed run reproduces exactly. Without
    ``seed``, torch's global RNG (or ``generator``) is used.
    """

    def __init__(self, vocab_size: int, pad_id: int, mask_id: int, special_ids: list[int],
                 mlm_probability: float = 0.15, pad_to_multiple_of: int = 8, nsp: bool = True,
                 generator: torch.Generator | None = None, seed: int | None = None):
        self.vocab_size, self.pad_id, self.mask_id = vocab_size, pad_id, mask_id
        self.special = torch.tensor(sorted(set(special_ids)), dtype=torch.long)
        keep = torch.ones(vocab_size, dtype=torch.bool)
        keep[self.special] = False
        self.random_ids = keep.nonzero().squeeze(1)  # random replacements are never special tokens
        self.p, self.multiple, self.nsp, self.generator = mlm_probability, pad_to_multiple_of, nsp, generator
        self.seed = seed

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        lens = torch.tensor([len(e["input_ids"]) for e in examples], dtype=torch.int32)
        T = int(lens.max())
        if self.multiple > 1:
            T = -(-T // self.multiple) * self.multiple
        B = len(examples)
        ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        types = torch.zeros((B, T), dtype=torch.long)
        for i, e in enumerate(examples):
            ids[i, :lens[i]] = torch.as_tensor(e["input_ids"])
            types[i, :lens[i]] = torch.as_tensor(e["token_type_ids"])
        attention_mask = torch.arange(T)[None, :] < lens[:, None]
        g = self.generator
        if self.seed is not None:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(examples[0].get("index", 0)))
        input_ids, labels = self.mask(ids, attention_mask, g)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": types, "labels": labels,
                 "mlm_positions": labels.flatten().ne(-100).nonzero().squeeze(1),
                 "token_positions": attention_mask.flatten().nonzero().squeeze(1),
                 "cu_seqlens": torch.nn.functional.pad(lens.cumsum(0, dtype=torch.int32), (1, 0)),
                 "max_seqlen": int(lens.max())}
        if self.nsp:
            batch["next_sentence_label"] = torch.tensor([e["next_sentence_label"] for e in examples], dtype=torch.long)
        return batch

    def mask(self, ids: torch.Tensor, attention_mask: torch.Tensor,
             g: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """BERT masking: returns (masked input_ids, labels with -100 where nothing is predicted)."""
        candidates = attention_mask & ~torch.isin(ids, self.special)
        chosen = candidates & (torch.rand(ids.shape, generator=g) < self.p)
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        u = torch.rand(ids.shape, generator=g)
        to_mask, to_random = chosen & (u < 0.8), chosen & (u >= 0.8) & (u < 0.9)
        rand = self.random_ids[torch.randint(len(self.random_ids), ids.shape, generator=g)]
        out = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        return torch.where(to_random, rand, out), labels


# ----------------------------------------------------------------------------- the DataModule
class MLMDataModule(TextDataModule):
    """BERT pre-training batches (see the module docstring for the keys) of at most ``seq_len``
    tokens (``max_seq_len`` is accepted as an alias). ``tokenizer``: wordpiece (trained with
    ``vocab_size``, or ``tokenizer_file``: a vocab.txt or JSON) or file (a JSON with BERT's specials).

    After ``setup``: ``vocab_size``, ``seq_len``, ``pad_id``, ``mask_id``, ``cls_id``, ``sep_id``,
    ``num_examples`` ({split: count}).
    """

    kind = "mlm"
    shuffle_train = True

    def __init__(self, source: str = "python-docs", data_files: Any = None, text_field: str = "text",
                 dataset_config: str | None = None, tokenizer: str = "wordpiece", vocab_size: int = 8192,
                 tokenizer_file: str | None = None, lowercase: bool = True, seq_len: int = 128,
                 nsp: bool = True, short_seq_prob: float = 0.1, mlm_probability: float = 0.15,
                 pad_to_multiple_of: int = 8, batch_size: int = 32, eval_batch_size: int | None = None,
                 num_workers: int = 0, pin_memory: bool = False, cache_dir: str = "data_cache", num_proc: int = 1,
                 seed: int = 1234, val_fraction: float = 0.0005, test_fraction: float = 0.0005,
                 split_seed: int = 0, max_seq_len: int | None = None):
        seq_len = max_seq_len or seq_len
        if tokenizer not in ("wordpiece", "file"):
            raise UserError(f"tokenizer={tokenizer!r}: MLM needs BERT's special tokens; use wordpiece or file")
        if seq_len < 8:
            raise UserError(f"seq_len={seq_len} is too short for sentence pairs; use at least 8")
        check_float("data.mlm_probability", mlm_probability, 0.0, 1.0, low_open=True)
        check_float("data.short_seq_prob", short_seq_prob, 0.0, 1.0)
        check_int("data.pad_to_multiple_of", pad_to_multiple_of)
        self.lowercase = lowercase
        super().__init__(source, data_files, text_field, dataset_config, tokenizer, vocab_size, tokenizer_file,
                         seq_len, batch_size, eval_batch_size, num_workers, pin_memory, cache_dir, num_proc, seed,
                         val_fraction, test_fraction, split_seed)
        self.max_seq_len, self.nsp, self.short_seq_prob = seq_len, nsp, short_seq_prob
        self.mlm_probability, self.pad_to_multiple_of = mlm_probability, pad_to_multiple_of
        self.num_examples: dict[str, int] = {}

    def _tokenizer_identity(self) -> dict:
        tf = {"tokenizer_file": _files_identity(self.tokenizer_file)} if self.tokenizer_file else {}
        return {"kind": self.tokenizer_kind, "lowercase": self.lowercase,
                "vocab_size": None if self.tokenizer_file else self.requested_vocab_size, **tf}

    def _build_tokenizer(self, splits):
        tok = build_tokenizer(self.tokenizer_kind, vocab_size=self.requested_vocab_size,
                              tokenizer_file=self.tokenizer_file, texts=lambda: iter_texts(splits["train"]),
                              cache_dir=self.cache_dir, cache_name=self._tokenizer_cache_name(),
                              lowercase=self.lowercase)
        missing = [t for t in BERT_SPECIALS if tok.token_to_id(t) is None]
        if missing:
            raise UserError(f"the tokenizer lacks BERT's special tokens {missing}")
        return tok

    def _write(self, out: Path, splits, tok, dtype: np.dtype) -> dict:
        def encode(batch: dict[str, list]) -> dict[str, list]:
            segs = [split_segments(t) for t in batch["text"]]
            flat = tok.encode_batch([s for doc in segs for s in doc], add_special_tokens=False)
            res: dict[str, list] = {"ids": [], "seg_lens": []}
            k = 0
            for doc in segs:
                enc = [e.ids for e in flat[k:k + len(doc)] if e.ids]
                k += len(doc)
                res["ids"].append([t for e in enc for t in e])
                res["seg_lens"].append([len(e) for e in enc])
            return res

        counts = {}
        for split in SPLITS:
            ds = self._map(splits[split], encode, split, out, ids=dtype.name, seg_lens="int32")
            counts[split] = write_memmap(ds, "ids", out / f"{split}.bin", dtype)
            nseg = write_memmap(ds, "seg_lens", out / f"{split}.seglens.bin", np.dtype(np.int32))
            docsegs = pc.list_value_length(ds.with_format("arrow")[:]["seg_lens"]).to_numpy(zero_copy_only=False)
            np.save(out / f"{split}.docsegs.npy", docsegs.astype(np.int64))
            info(f"{split}: {len(ds)} documents, {nseg:,} segments, {counts[split]:,} tokens -> {out}")
        return {"special_ids": {t: tok.token_to_id(t) for t in BERT_SPECIALS}, "num_tokens": counts}

    def _load(self, out: Path, meta: dict) -> None:
        self.special_ids = meta["special_ids"]
        self.pad_id, self.mask_id = self.special_ids["[PAD]"], self.special_ids["[MASK]"]
        self.cls_id, self.sep_id = self.special_ids["[CLS]"], self.special_ids["[SEP]"]
        for k, split in enumerate(SPLITS):
            docsegs = np.load(out / f"{split}.docsegs.npy")
            seglens = np.fromfile(out / f"{split}.seglens.bin", dtype=np.int32)[:int(docsegs.sum())].astype(np.int64)
            rng = np.random.default_rng([self.seed if split == "train" else self.split_seed, k])
            pairs = build_pairs(seglens, docsegs, self.max_seq_len, rng, nsp=self.nsp,
                                short_seq_prob=self.short_seq_prob)
            if len(pairs) == 0:
                raise ValueError(f"the {split} split of {self.source!r} yields no MLM examples; use a larger corpus")
            self.datasets[split] = PairDataset(out / f"{split}.bin", meta["dtype"], meta["num_tokens"][split],
                                               pairs, self.cls_id, self.sep_id)
            self.num_examples[split] = len(pairs)

    def spec(self) -> DataSpec:
        """The data -> model contract (after ``setup``): vocabulary, sequence length, pad id."""
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len, pad_id=self.pad_id)

    def collator(self, generator: torch.Generator | None = None, seed: int | None = None) -> MLMCollator:
        return MLMCollator(self.vocab_size, self.pad_id, self.mask_id, list(self.special_ids.values()),
                           self.mlm_probability, self.pad_to_multiple_of, self.nsp, generator, seed)

    def _collate(self, split: str) -> MLMCollator:
        # per-batch masks seeded by sample ids: train masks change every epoch, eval masks never do
        return self.collator(seed=self.seed if split == "train" else self.split_seed)
