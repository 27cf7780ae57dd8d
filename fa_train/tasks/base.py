"""The shared LightningModule: holds the model, builds optimizer and schedule, logs perf shape."""
from __future__ import annotations

from typing import Any, Mapping

import lightning as L
import torch

from fa_train.errors import check_bool, check_choice
from fa_train.tasks.optim import build_optimizer, check_optim_config, lr_multiplier
from fa_train.utils.log_cadence import logs_this_step


def _plain(x):
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        if isinstance(x, (DictConfig, ListConfig)):
            return OmegaConf.to_container(x, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(x) if isinstance(x, Mapping) else x


def batch_get(batch, *names, index=None):
    """First present key of a dict batch, or positional item ``index`` of a tuple batch."""
    if isinstance(batch, Mapping):
        for n in names:
            if n in batch and batch[n] is not None:
                return batch[n]
        return None
    if index is not None and isinstance(batch, (tuple, list)) and len(batch) > index:
        return batch[index]
    return None


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile_mode(mode, key: str = "task.compile_mode"):
    """A UserError naming ``key`` unless `mode` is a torch.compile mode (or None: torch's default)."""
    if mode is not None:
        check_choice(key, mode, COMPILE_MODES)


class TaskModule(L.LightningModule):
    """Base task. Subclasses implement ``step(batch, stage) -> loss`` and log their metrics."""

    def __init__(self, model: torch.nn.Module, optimizer: Mapping | None = None,
                 scheduler: Mapping | None = None, compile: bool = False,
                 compile_mode: str | None = None):
        super().__init__()
        self.model = model
        self.optimizer_cfg = _plain(optimizer) or {"name": "adamw", "lr": 1e-3}
        self.scheduler_cfg = _plain(scheduler) or {"name": "none"}
        check_optim_config(self.optimizer_cfg, self.scheduler_cfg)
        check_compile_mode(compile_mode)
        self.compile = check_bool("task.compile", compile)
        self.compile_mode = compile_mode
        self._compiled = None
        self.tokens_seen = 0  # per-process count of input tokens (a padded batch counts its padding)
        self._step_hooks: list = []   # modules told when each optimizer step starts (on_fit_start)
        self.test_stage = "test"  # test metrics are logged as f"{test_stage}/..."
        self.save_hyperparameters(ignore=["model"])

    # -- model call (optionally compiled) ---------------------------------------------------------
    def configure_model(self):
        if self.compile and self._compiled is None:
            # kept out of the module tree so checkpoints hold the plain model's keys
            object.__setattr__(self, "_compiled", torch.compile(self.model, mode=self.compile_mode))

    def forward(self, *args, **kwargs):
        fn = self._compiled if self._compiled is not None else self.model
        return fn(*args, **kwargs)

    # -- Lightning hooks --------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx):
        return self.step(batch, "val")

    def test_step(self, batch, batch_idx):
        return self.step(batch, self.test_stage)

    def step(self, batch, stage: str) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def logs_now(self, stage: str) -> bool:
        """Whether `stage`'s step logs its metrics now: evaluation always; a training step only when
        Lightning writes them (fa_train.utils.log_cadence)."""
        return stage != "train" or logs_this_step(self._trainer)

    def count_tokens(self, n: int | torch.Tensor):
        self.tokens_seen += int(n)

    def _has_grad_scaler(self) -> bool:
        trainer = self._trainer
        return getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is not None

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None):
        """Clip in place when no loss scaler is active (bf16 / fp32): gradients are already true
        values, so fused AdamW can be clipped too. With a scaler, Lightning unscales first."""
        if not gradient_clip_val or self._has_grad_scaler():
            return super().configure_gradient_clipping(optimizer, gradient_clip_val,
                                                       gradient_clip_algorithm)
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(self.parameters(), gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)

    def configure_optimizers(self):
        ocfg = dict(self.optimizer_cfg)
        if ocfg.get("fused") is None and self._has_grad_scaler():
            ocfg["fused"] = False  # a fused optimizer unscales internally: Lightning cannot clip it
        opt = build_optimizer(self.model, **ocfg)
        scfg = dict(self.scheduler_cfg)
        name = scfg.pop("name", "none")
        if name == "none":
            return opt
        total = scfg.pop("total_steps", None)
        if not total and self.trainer is not None:
            est = self.trainer.estimated_stepping_batches
            total = int(est) if est and est != float("inf") else None
        warmup = int(scfg.pop("warmup_steps", 0) or 0)
        min_ratio = float(scfg.pop("min_lr_ratio", 0.0) or 0.0)
        lr_multiplier(0, name)  # validates the name
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_multiplier(s, name, warmup, total, min_ratio))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self):
        # found once, not on every step: e.g. Performer's feature redraws
        self._step_hooks = [m for m in self.model.modules() if hasattr(m, "start_train_step")]

    def on_train_batch_start(self, batch, batch_idx):
        if self.trainer is None:
            return
        for module in self._step_hooks:
            module.start_train_step(self.trainer.global_step)
        if self.trainer.optimizers and logs_this_step(self.trainer):
            # a CPU tensor: Lightning turns a Python number into a tensor on the module's device,
            # a blocking host-to-device copy that would drain the GPU queue every step
            lr = torch.tensor(self.trainer.optimizers[0].param_groups[0]["lr"])
            self.log("train/lr", lr, on_step=True, on_epoch=False, batch_size=1)
