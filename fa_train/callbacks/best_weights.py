"""``checkpoints/best_weights.pt``: the task's weights at its best validation so far.

At the end of every validation during training (not Lightning's sanity check) whose `monitor`
metric improved on the best so far (`mode` max or min), the LightningModule's state_dict is saved
with the step and the value, atomically; a run that never logs the metric (language models have
no val/acc) saves nothing. The best value and step travel in last.ckpt, so a resumed run compares
against the best before the pause. train() tests these weights after the final ones.
"""
from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import torch

from fa_train.errors import check_choice
from fa_train.utils.checkpoints import commit, partial_path


class BestWeights(L.Callback):
    def __init__(self, dirpath: str, monitor: str = "val/acc", mode: str = "max",
                 filename: str = "best_weights.pt"):
        super().__init__()
        self.mode = check_choice("mode", mode, ("max", "min"))
        self.monitor = monitor
        self.path = Path(dirpath) / filename
        self.best_value: float | None = None
        self.best_step: int | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    @property
    def summary(self) -> dict[str, float | int]:
        """{"best_<monitor>": value, "best_<stage>/step": step} once a best exists, else {}."""
        if self.best_step is None:
            return {}
        stage = self.monitor.split("/")[0]
        return {f"best_{self.monitor}": self.best_value, f"best_{stage}/step": self.best_step}

    def improved(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best_value is None:
            return True
        return value > self.best_value if self.mode == "max" else value < self.best_value

    def on_validation_end(self, trainer, pl_module):
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or value is None or not self.improved(float(value)):
            return
        self.best_value, self.best_step = float(value), trainer.global_step
        if trainer.is_global_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = partial_path(self.path)
            torch.save({"state_dict": pl_module.state_dict(), "step": self.best_step,
                        "monitor": self.monitor, "value": self.best_value}, tmp)
            commit(tmp, self.path)

    def state_dict(self) -> dict:
        return {"best_value": self.best_value, "best_step": self.best_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best_value, self.best_step = state_dict["best_value"], state_dict["best_step"]
