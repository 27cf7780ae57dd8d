"""Shared pieces of the sequence-classification DataModules (LRA tasks and long documents).

Batches are dicts: `input_ids` int64 (B, L), `attention_mask` bool (B, L) (True = real token;
None when no position of the batch is padding, decided here on the host so that the model never
has to ask the GPU), `labels` int64 (B,) — float32 multi-hot (B, C) for multi-label tasks.
Two-tower tasks (`num_towers == 2`, Retrieval) stack the towers: `input_ids`/`attention_mask` are
(B, 2, L). After `setup()`, `spec()` describes the data to the model (`fa_train.data.spec.DataSpec`)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from fa_train.data.spec import DataSpec
from fa_train.utils.resumable import train_loader
from fa_train.errors import check_loader_config


class MapDataset(Dataset):
    """items[i] -> (encode(items[i]) , labels[i]); `encode` must be picklable (module-level)."""

    def __init__(self, items: Sequence[Any], labels: Sequence[Any] | np.ndarray,
                 encode: Callable[[Any], Any], index: Sequence[int] | None = None):
        self.items, self.labels, self.encode = items, labels, encode
        self.index = np.arange(len(labels)) if index is None else np.asarray(index)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int):
        j = int(self.index[i])
        return self.encode(self.items[j]), self.labels[j]


class Collator:
    """Pads/truncates every sequence to `seq_len` and builds the batch dict."""

    def __init__(self, seq_len: int, pad_id: int = 0, num_towers: int = 1, multi_label: bool = False):
        self.seq_len, self.pad_id = seq_len, pad_id
        self.num_towers, self.multi_label = num_towers, multi_label

    def _pad(self, seqs: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = np.full((len(seqs), self.seq_len), self.pad_id, np.int64)
        mask = np.zeros((len(seqs), self.seq_len), np.bool_)
        for k, s in enumerate(seqs):
            s = np.asarray(s).reshape(-1)[: self.seq_len]
            ids[k, : len(s)] = s
            mask[k, : len(s)] = True
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def __call__(self, batch) -> dict[str, torch.Tensor]:
        seqs, labels = zip(*batch)
        if self.num_towers == 1:
            ids, mask = self._pad(seqs)
        else:
            parts = [self._pad([s[t] for s in seqs]) for t in range(self.num_towers)]
            ids = torch.stack([p[0] for p in parts], dim=1)
            mask = torch.stack([p[1] for p in parts], dim=1)
        if bool(mask.all()):
            mask = None
        if self.multi_label:
            lab = torch.from_numpy(np.stack([np.asarray(x, np.float32) for x in labels]))
        else:
            lab = torch.as_tensor(np.asarray(labels, np.int64))
        return {"input_ids": ids, "attention_mask": mask, "labels": lab}


class SequenceClassificationDataModule(L.LightningDataModule):
    """Base: subclasses implement `build()` -> {'train','val','test': Dataset} and set
    `vocab_size`, `seq_len`, `num_classes` there (image tasks also `image_size`)."""

    num_towers = 1
    multi_label = False
    image_size: int | None = None

    def __init__(self, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 eval_batch_size: int | None = None, pin_memory: bool | None = None,
                 drop_last: bool = False):
        super().__init__()
        check_loader_config(batch_size, eval_batch_size, num_workers)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size or batch_size)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        # pinned batches reach the GPU without stalling the host; None: pinned when CUDA is there
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self.drop_last = bool(drop_last)
        self.pad_id = 0
        self.vocab_size: int | None = None
        self.seq_len: int | None = None
        self.num_classes: int | None = None
        self.datasets: dict[str, Dataset] | None = None

    def build(self) -> dict[str, Dataset]:  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.datasets is None:
            self.datasets = self.build()

    def spec(self) -> DataSpec:
        """The data -> model contract (after ``setup``)."""
        return DataSpec(vocab_size=self.vocab_size, seq_len=self.seq_len, num_classes=self.num_classes,
                        pad_id=self.pad_id, image_size=self.image_size, num_towers=self.num_towers,
                        multi_label=self.multi_label)

    def collator(self) -> Collator:
        return Collator(self.seq_len, self.pad_id, self.num_towers, self.multi_label)

    def _loader(self, split: str, train: bool) -> DataLoader:
        if self.datasets is None:
            self.setup()
        kw = dict(num_workers=self.num_workers, collate_fn=self.collator(),
                  pin_memory=self.pin_memory, persistent_workers=self.num_workers > 0)
        if train:  # a dataset with `global_ids` draws per-sample randomness from the sample id
            return train_loader(self.datasets[split], self.batch_size, self.seed,
                                global_ids=getattr(self.datasets[split], "global_ids", False),
                                drop_last=self.drop_last, **kw)
        return DataLoader(self.datasets[split], batch_size=self.eval_batch_size, shuffle=False, **kw)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)


def take(n: int | None, size: int) -> int:
    """min(n, size), with None meaning all."""
    return size if n is None else min(int(n), size)
