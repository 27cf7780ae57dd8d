"""Exact-resume data loading: a deterministic, position-aware wrapper around a map-style loader.

Lightning restores the model, optimizer, schedule and loop counters from a checkpoint, but a plain
DataLoader restarts its epoch from the first batch with a fresh shuffle. ``ResumableLoader``
rebuilds the loader for every epoch with a sampler seeded by (seed, epoch) and, when the trainer is
restarting from a checkpoint, starts at the batch the checkpoint had reached. Result: a run stopped
at step k and resumed reaches step n with the same batches, in the same order, as one that ran
straight to n. It also shards across ranks (like DistributedSampler), so it is used for DDP too.
"""
from __future__ import annotations

import math

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler


class _EpochSampler(Sampler):
    def __init__(self, n, shuffle, seed, rank, world, drop_last, start=0):
        self.n, self.shuffle, self.seed = n, shuffle, seed
        self.rank, self.world, self.drop_last, self.start = rank, world, drop_last, start
        if drop_last and n % world:
            self.per_rank = n // world
        else:
            self.per_rank = math.ceil(n / world)

    def _indices(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed)
            idx = torch.randperm(self.n, generator=g).tolist()
        else:
            idx = list(range(self.n))
        total = self.per_rank * self.world
        if total > len(idx):  # pad by wrapping, as DistributedSampler does
            idx += idx[: total - len(idx)]
        return idx[:total][self.rank::self.world]

    def __iter__(self):
        return iter(self._indices()[self.start:])

    def __len__(self):
        return max(0, self.per_rank - self.start)


class ResumableLoader:
    """Iterable with ``__len__``; see the module docstring. ``trainer`` is set by train.py."""

    def __init__(self, loader: DataLoader, seed: int = 0, rank: int = 0, world_size: int = 1):
        self.loader = loader
        self.dataset = loader.dataset
        self.batch_size = loader.batch_size
        self.shuffle = isinstance(loader.sampler, RandomSampler)
        self.drop_last = loader.drop_last
        self.seed, self.rank, self.world_size = int(seed), rank, world_size
        self.trainer = None
        self._epoch = 0
        self._resume_batches = 0

    @staticmethod
    def supports(loader) -> bool:
        return (isinstance(loader, DataLoader)
                and not isinstance(loader.dataset, IterableDataset)
                and loader.batch_size is not None
                and type(loader.batch_sampler) is BatchSampler
                and type(loader.sampler).__name__ in ("RandomSampler", "SequentialSampler"))

    def _position(self):
        """(epoch, batches already consumed in it), from the trainer's optimizer-step count:
        consumed = global_step x accumulate_grad_batches. Lightning restores global_step from a
        checkpoint before it asks for the iterator, so a resumed run picks up at the same batch."""
        t = self.trainer
        if t is None:
            return self._epoch, 0
        n = len(self)
        if n <= 0:
            return 0, 0
        consumed = int(t.global_step) * int(t.accumulate_grad_batches or 1)
        return consumed // n, consumed % n

    def _n_batches(self, start):
        per_rank = _EpochSampler(len(self.dataset), False, 0, self.rank, self.world_size,
                                 self.drop_last).per_rank
        n = per_rank - start * self.batch_size
        return n // self.batch_size if self.drop_last else math.ceil(max(n, 0) / self.batch_size)

    def __len__(self):
        return self._n_batches(0)

    # The position is derived from the restored global step (see _position), so the state a
    # checkpoint needs is only informative; having these methods marks the loader resumable.
    def state_dict(self):
        epoch, skip = self._position()
        return {"epoch": epoch, "batches_in_epoch": skip, "seed": self.seed}

    def load_state_dict(self, state):
        if state and int(state.get("seed", self.seed)) != self.seed:
            raise ValueError(f"checkpoint data seed {state['seed']} differs from seed {self.seed}")

    def __iter__(self):
        epoch, skip = self._position()
        self._epoch = epoch + 1
        sampler = _EpochSampler(len(self.dataset), self.shuffle, self.seed + epoch, self.rank,
                                self.world_size, self.drop_last, start=skip * self.batch_size)
        ld = self.loader
        dl = DataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler,
                        collate_fn=ld.collate_fn, num_workers=ld.num_workers,
                        pin_memory=ld.pin_memory, drop_last=self.drop_last,
                        worker_init_fn=ld.worker_init_fn, timeout=ld.timeout,
                        persistent_workers=False,
                        prefetch_factor=ld.prefetch_factor if ld.num_workers > 0 else None)
        return iter(dl)
