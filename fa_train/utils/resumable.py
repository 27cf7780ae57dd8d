"""Exact-resume data loading: the one sampler and loader every datamodule's train loader uses.

A plain DataLoader restarts its epoch from the first batch with a fresh shuffle after a restart.
`EpochSampler` draws each epoch's order as a pure function of (seed, epoch), and
`ResumableDataLoader` tells Lightning (through ``state_dict``, saved in every checkpoint) how far
into the epoch it got; loading that state makes the next iteration start right after it. Result:
a run stopped at step k and resumed reaches step n with the same batches, in the same order, as
one that ran straight to n. Under DDP Lightning wraps the sampler in a distributed sampler.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import DataLoader, Sampler


class EpochSampler(Sampler[int]):
    """Sample ids for one epoch, a pure function of (seed, epoch), resumable mid-epoch.

    ``global_ids=True``: ids are unique across epochs: epoch ``e`` yields ``e * num_samples + j``
    for ``j`` in ``range(num_samples)``; datasets take the id modulo their length and may use the
    whole id as a seed for per-sample randomness (random windows, masks). ``global_ids=False``:
    plain indices ``j``. In order, or (``shuffle=True``) in a seeded permutation per epoch.
    ``skip`` leading samples are left out after a resume.
    """

    def __init__(self, num_samples: int, seed: int = 0, shuffle: bool = False,
                 global_ids: bool = True):
        self.num_samples, self.seed, self.shuffle = num_samples, seed, shuffle
        self.global_ids = global_ids
        self.epoch, self.skip, self._resume = 0, 0, None

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this before every epoch
        self.epoch = epoch
        self.skip = self._resume[1] if self._resume and self._resume[0] == epoch else 0

    def resume(self, epoch: int, samples: int) -> None:
        self._resume = (epoch, samples)
        self.set_epoch(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        offset = self.epoch * self.num_samples if self.global_ids else 0
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = (torch.randperm(self.num_samples, generator=g) + offset).tolist()
        else:
            order = range(offset, offset + self.num_samples)
        return iter(order[self.skip:])


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class ResumableDataLoader(DataLoader):
    """A DataLoader over an `EpochSampler` that Lightning checkpoints (it has ``state_dict``):
    the state is (epoch, samples of the epoch consumed on all ranks); loading it makes the
    next iteration start right after them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._batches = 0

    def _epoch_sampler(self) -> EpochSampler:
        s = self.sampler  # Lightning wraps it in a DistributedSamplerWrapper under DDP
        s = getattr(getattr(s, "dataset", None), "_sampler", s)
        if not isinstance(s, EpochSampler):
            raise TypeError("ResumableDataLoader needs an EpochSampler")
        return s

    def __iter__(self):
        self._batches = 0
        for batch in super().__iter__():
            self._batches += 1  # Lightning does not prefetch from sized loaders: this is what it consumed
            yield batch

    def state_dict(self) -> dict[str, int]:
        s = self._epoch_sampler()
        return {"epoch": s.epoch, "samples": s.skip + self._batches * self.batch_size * _world_size()}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._epoch_sampler().resume(int(state["epoch"]), int(state["samples"]))


def train_loader(dataset, batch_size: int, seed: int, shuffle: bool = True,
                 global_ids: bool = False, **kw) -> ResumableDataLoader:
    """The resumable train loader over `dataset` (kw: DataLoader options such as collate_fn,
    num_workers, drop_last)."""
    sampler = EpochSampler(len(dataset), seed=seed, shuffle=shuffle, global_ids=global_ids)
    return ResumableDataLoader(dataset, batch_size=batch_size, sampler=sampler, **kw)
