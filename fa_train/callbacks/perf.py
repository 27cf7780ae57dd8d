"""Throughput, MFU and peak-memory monitor.

tokens/s per GPU = input tokens this process trained on / wall time of those steps (the first
``warmup_steps`` optimizer steps are excluded: compilation, autotuning, allocator warm-up; so is
time spent in validation).
MFU = tokens/s per GPU x FLOPs per token / peak FLOP/s, with FLOPs per token from
fa_train.metrics.flops.transformer_flops_per_token (6P + 12·L·H·Q·T, PaLM appendix B) and the
peak from fa_train.metrics.flops.gpu_peak_flops (None on CPU or unknown GPUs).
"""
from __future__ import annotations

import time

import lightning as L
import torch

from fa_train.metrics.flops import gpu_peak_flops, transformer_flops_per_token


class PerfMonitor(L.Callback):
    def __init__(self, warmup_steps: int = 5, log_every_n_steps: int = 10):
        super().__init__()
        self.warmup_steps = int(warmup_steps)
        self.log_every_n_steps = max(1, int(log_every_n_steps))
        self.summary: dict = {}
        self._t0 = None
        self._tokens0 = 0
        self._seq_len = None
        self._excluded = 0.0
        self._val_t0 = None
        self._final = False

    def _sync(self, pl_module):
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_start(self, trainer, pl_module):
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        self._t0 = None
        self._start_step = trainer.global_step
        self._excluded = 0.0
        self._val_t0 = None
        self._final = False

    # validation time is not training time
    def on_validation_start(self, trainer, pl_module):
        if self._t0 is not None and not trainer.sanity_checking:
            self._sync(pl_module)
            self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if self._val_t0 is not None:
            self._sync(pl_module)
            self._excluded += time.perf_counter() - self._val_t0
            self._val_t0 = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._seq_len is None:
            x = batch["input_ids"] if isinstance(batch, dict) and "input_ids" in batch else None
            if x is None and isinstance(batch, (tuple, list)) and torch.is_tensor(batch[0]):
                x = batch[0]
            if x is not None and x.dim() >= 2:
                self._seq_len = int(x.shape[1])

    def _flops_per_token(self, pl_module):
        model = getattr(pl_module, "model", None)
        shape = model.flops_shape() if model is not None and hasattr(model, "flops_shape") else None
        if not shape or not self._seq_len:
            return None
        return transformer_flops_per_token(seq_len=self._seq_len, **shape)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        steps = trainer.global_step - self._start_step
        if self._t0 is None:
            warmup = self.warmup_steps
            if trainer.max_steps and trainer.max_steps > 0:  # short runs still get a window
                warmup = min(warmup, trainer.max_steps - 1)
            if steps >= warmup:
                self._sync(pl_module)
                self._t0 = time.perf_counter()
                self._tokens0 = pl_module.tokens_seen
                self._steps0 = steps
            return
        last = bool(trainer.max_steps and trainer.max_steps > 0
                    and trainer.global_step >= trainer.max_steps)
        if last:  # final numbers before any end-of-training checkpoint write
            self._update(trainer, pl_module, log=True)
            self._final = True
        elif steps % self.log_every_n_steps == 0:
            self._update(trainer, pl_module, log=True)

    def _update(self, trainer, pl_module, log):
        if self._t0 is None:
            return
        self._sync(pl_module)
        dt = time.perf_counter() - self._t0 - self._excluded
        tokens = pl_module.tokens_seen - self._tokens0
        if dt <= 0 or tokens <= 0:
            return
        tps = tokens / dt
        s = {"tokens_per_sec_per_device": tps, "perf_steps": trainer.global_step - self._start_step
             - self._steps0, "seq_len": self._seq_len}
        fpt = self._flops_per_token(pl_module)
        if fpt:
            s["flops_per_token"] = fpt
            s["model_tflops_per_sec_per_device"] = tps * fpt / 1e12
        s.update(self._device_facts(pl_module))
        peak = gpu_peak_flops(s["device_name"])
        if fpt and peak:
            s["mfu"] = tps * fpt / peak
        self.summary = s
        if log:
            # CPU tensors: Python numbers would become (blocking) copies to the GPU
            metrics = {f"perf/{k}": torch.tensor(float(v)) for k, v in s.items()
                       if isinstance(v, (int, float))}
            pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)

    @staticmethod
    def _device_facts(pl_module) -> dict:
        """The device's name and this process's peak GPU memory so far."""
        if pl_module.device.type != "cuda":
            return {"device_name": "cpu"}
        return {"device_name": torch.cuda.get_device_name(pl_module.device),
                "peak_memory_gib": torch.cuda.max_memory_allocated(pl_module.device) / 2**30}

    def on_train_end(self, trainer, pl_module):
        if not self._final:
            self._update(trainer, pl_module, log=False)
        if not self.summary:   # too few steps for a timing window: the device is still known
            self.summary = self._device_facts(pl_module)
