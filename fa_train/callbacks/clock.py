"""Training clock for time-to-accuracy and loss-against-tokens curves.

At every validation it logs ``time/train_s`` (wall seconds spent in training steps since the run
began, validation excluded) and ``time/elapsed_s`` (all wall seconds since the run began, validation
included) beside the validation metrics, so ``metrics.csv`` holds accuracy against wall time.
``tokens_seen`` (input tokens trained on since the run began, all processes; padding included where
a batch is padded) is logged with the training rows and with every validation, so runs of different
batch shapes can be compared at equal tokens. The clock is saved in checkpoints and continues across
resumed runs.
"""
from __future__ import annotations

import time

import lightning as L
import torch

from fa_train.utils.log_cadence import logs_this_step


class TrainingClock(L.Callback):
    def __init__(self):
        super().__init__()
        self.train_s = 0.0      # training seconds before the current stretch (resumed runs)
        self.elapsed_s = 0.0    # all seconds before the current stretch
        self._t0 = None         # start of the current stretch
        self._val_s = 0.0       # validation seconds within the current stretch
        self._val_t0 = None
        self.tokens = 0         # input tokens trained on, all processes, resumed runs included
        self._counted = 0       # this process's pl_module.tokens_seen already added to `tokens`

    @staticmethod
    def _now(pl_module) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def _totals(self, now: float) -> tuple[float, float]:
        stretch = now - self._t0
        return self.train_s + stretch - self._val_s, self.elapsed_s + stretch

    def on_train_start(self, trainer, pl_module):
        self._t0 = self._now(pl_module)
        self._val_s = 0.0
        self._counted = pl_module.tokens_seen

    def _log_tokens(self, trainer, pl_module, **when):
        self.tokens += (pl_module.tokens_seen - self._counted) * trainer.world_size
        self._counted = pl_module.tokens_seen
        # a CPU tensor: a Python number would become a blocking copy to the GPU
        pl_module.log("tokens_seen", torch.tensor(float(self.tokens)), batch_size=1, **when)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if logs_this_step(trainer):
            self._log_tokens(trainer, pl_module, on_step=True, on_epoch=False)

    def on_validation_start(self, trainer, pl_module):
        if self._t0 is not None and not trainer.sanity_checking:
            self._val_t0 = self._now(pl_module)

    def on_validation_epoch_end(self, trainer, pl_module):
        if self._val_t0 is None:
            return
        train_s, _ = self._totals(self._val_t0)
        _, elapsed_s = self._totals(self._now(pl_module))
        pl_module.log_dict({"time/train_s": train_s, "time/elapsed_s": elapsed_s},
                           on_step=False, on_epoch=True, batch_size=1)
        self._log_tokens(trainer, pl_module, on_step=False, on_epoch=True)

    def on_validation_end(self, trainer, pl_module):
        if self._val_t0 is not None:
            self._val_s += self._now(pl_module) - self._val_t0
            self._val_t0 = None

    def state_dict(self):
        if self._t0 is None:
            return {"train_s": self.train_s, "elapsed_s": self.elapsed_s, "tokens": self.tokens}
        train_s, elapsed_s = self._totals(time.perf_counter())
        return {"train_s": train_s, "elapsed_s": elapsed_s, "tokens": self.tokens}

    def load_state_dict(self, state):
        self.train_s = float(state.get("train_s", 0.0))
        self.elapsed_s = float(state.get("elapsed_s", 0.0))
        self.tokens = int(state.get("tokens", 0))
