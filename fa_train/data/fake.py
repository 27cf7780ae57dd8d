"""Tiny random datamodules with the real batch formats, for tests and smoke runs without data.

They accept (and ignore) any extra keyword, so a real data config can be retargeted:
``data._target_=fa_train.data.fake.FakeClassificationDataModule``.
Batch formats are those of fa_train.data: LM {"input_ids", "labels"}; MLM {"input_ids",
"attention_mask", "token_type_ids", "labels" (-100 = not masked), "next_sentence_label"};
classification {"input_ids" (B, N) or (B, 2, N), "attention_mask", "labels" (B,) or multi-hot (B, C)}.
"""
from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from fa_train.data.spec import DataSpec
from fa_train.utils.resumable import train_loader


class _Tensors(Dataset):
    def __init__(self, **tensors):
        self.tensors = tensors
        self.n = len(next(iter(tensors.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.tensors.items()}


class _FakeBase(L.LightningDataModule):
    def __init__(self, batch_size=4, seq_len=32, vocab_size=64, n_train=64, n_val=16, n_test=16,
                 seed=0, num_workers=0, **_ignored):
        super().__init__()
        self.batch_size, self.seq_len, self.vocab_size = int(batch_size), int(seq_len), int(vocab_size)
        self.n = {"train": int(n_train), "val": int(n_val), "test": int(n_test)}
        self.seed = int(seed)
        self.datasets = None

    def make(self, n, g):  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, stage=None):
        if self.datasets is None:
            g = torch.Generator().manual_seed(self.seed)
            self.datasets = {k: self.make(n, g) for k, n in self.n.items()}

    def spec(self) -> DataSpec:
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len)

    def train_dataloader(self):
        self.setup()
        return train_loader(self.datasets["train"], self.batch_size, self.seed, drop_last=True)

    def val_dataloader(self):
        self.setup()
        return DataLoader(self.datasets["val"], batch_size=self.batch_size)

    def test_dataloader(self):
        self.setup()
        return DataLoader(self.datasets["test"], batch_size=self.batch_size)


class _CountingLM(Dataset):
    """Sequence i counts up modulo vocab_size from a start drawn from (seed, i); built on the fly,
    so n can be large (throughput runs) at no memory cost."""

    def __init__(self, n, seq_len, vocab_size, seed):
        self.n, self.seq_len, self.vocab_size, self.seed = n, seq_len, vocab_size, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(i))
        start = int(torch.randint(0, self.vocab_size, (1,), generator=g))
        seq = (start + torch.arange(self.seq_len + 1)) % self.vocab_size
        return {"input_ids": seq[:-1], "labels": seq[1:]}


class FakeLMDataModule(_FakeBase):
    """Learnable toy LM data (each sequence counts up modulo vocab_size from a random start).
    Also the synthetic source for GPU throughput runs: data.n_train=1000000 +data.vocab_size=50257."""

    def make(self, n, g):
        return _CountingLM(n, self.seq_len, self.vocab_size,
                           int(torch.randint(0, 2**30, (1,), generator=g)))


class FakeMLMDataModule(_FakeBase):
    def __init__(self, nsp=True, **kw):
        super().__init__(**kw)
        self.nsp = nsp
        self.pad_id = 0

    def spec(self) -> DataSpec:
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len, pad_id=self.pad_id)

    def make(self, n, g):
        ids = torch.randint(5, self.vocab_size, (n, self.seq_len), generator=g)
        lengths = torch.randint(self.seq_len // 2, self.seq_len + 1, (n,), generator=g)
        mask = torch.arange(self.seq_len)[None] < lengths[:, None]
        ids = ids.masked_fill(~mask, 0)
        masked = (torch.rand(n, self.seq_len, generator=g) < 0.15) & mask
        masked[:, 1] = True
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        ids = ids.masked_fill(masked, 4)
        types = (torch.arange(self.seq_len)[None] >= lengths[:, None] // 2).long() * mask
        return _Tensors(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                        next_sentence_label=torch.randint(0, 2, (n,), generator=g))


class FakeClassificationDataModule(_FakeBase):
    """Label = whether token 1 appears in the first half (learnable); optional two towers and
    multi-label (labels multi-hot over num_classes)."""

    def __init__(self, num_classes=2, num_towers=1, multi_label=False, **kw):
        super().__init__(**kw)
        self.num_classes, self.num_towers = int(num_classes), int(num_towers)
        self.multi_label, self.pad_id = bool(multi_label), 0

    def spec(self) -> DataSpec:
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len, num_classes=self.num_classes,
                        pad_id=self.pad_id, num_towers=self.num_towers, multi_label=self.multi_label)

    def make(self, n, g):
        shape = (n, self.num_towers, self.seq_len) if self.num_towers > 1 else (n, self.seq_len)
        ids = torch.randint(1, self.vocab_size, shape, generator=g)
        lengths = torch.randint(self.seq_len // 2, self.seq_len + 1, shape[:-1], generator=g)
        mask = torch.arange(self.seq_len) < lengths[..., None]
        ids = ids.masked_fill(~mask, 0)
        if self.multi_label:
            labels = (torch.rand(n, self.num_classes, generator=g) < 0.3).float()
        else:
            labels = torch.randint(0, self.num_classes, (n,), generator=g)
        return _Tensors(input_ids=ids, attention_mask=mask, labels=labels)
