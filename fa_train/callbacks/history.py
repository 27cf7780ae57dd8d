"""Train and validation loss per step, kept in memory and drawn to ``loss_curve.png``.

Losses are stored as detached tensors and read only at the end, so no GPU sync per step. The
history is part of the checkpoint, so a resumed run's curve starts at step 0, not at the resume.
"""
from __future__ import annotations

from pathlib import Path

import lightning as L
import torch


class LossHistory(L.Callback):
    def __init__(self, plot_path: str | Path | None = None, title: str = ""):
        super().__init__()
        self.plot_path = Path(plot_path) if plot_path else None
        self.title = title
        self._train: list[tuple[int, object]] = []
        self.val: list[tuple[int, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not torch.is_tensor(loss) or not trainer.is_global_zero:
            return
        loss = loss.detach() * trainer.accumulate_grad_batches  # Lightning divides it per micro-batch
        step = trainer.global_step  # one point per optimizer step (its last micro-batch)
        if self._train and self._train[-1][0] == step:
            self._train[-1] = (step, loss)
        else:
            self._train.append((step, loss))

    @property
    def train(self) -> list[tuple[int, float]]:
        self._train = [(s, float(v)) for s, v in self._train]
        return self._train

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        v = trainer.callback_metrics.get("val/loss")
        if v is not None:
            self.val.append((trainer.global_step, float(v)))

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            self.plot()

    def on_exception(self, trainer, pl_module, exception):
        if trainer.is_global_zero:
            self.plot()

    def plot(self) -> bool:
        """Draw the curves to `plot_path`; False when there is nothing to draw or no matplotlib."""
        if self.plot_path is None or not (self.train or self.val):
            return False
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:  # pragma: no cover
            return False
        fig, ax = plt.subplots(figsize=(7, 4.2))
        if self.train:
            ax.plot([s for s, _ in self.train], [v for _, v in self.train], label="train loss", lw=1.2)
        if self.val:
            ax.plot([s for s, _ in self.val], [v for _, v in self.val], "o-", label="val loss", lw=1.5)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(self.title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        self.plot_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(self.plot_path, dpi=110)
        plt.close(fig)
        return True

    def state_dict(self):
        return {"train": self.train, "val": self.val}

    def load_state_dict(self, state):
        self._train = [tuple(x) for x in state.get("train", [])]
        self.val = [tuple(x) for x in state.get("val", [])]
