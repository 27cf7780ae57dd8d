"""GPT-2 training-step throughput, of the bare model and through the trainer.

One optimizer step = bf16 autocast forward with the loss inside the model, backward, gradient
clipping at 1.0, fused AdamW: what ``fa-train`` runs for ``experiment=gpt2/*``. Runner ``bare``
times that loop alone; runner ``trainer`` runs the same model and batch through the Lightning
trainer with the project's callbacks (PerfMonitor, LossHistory, progress bar, CSV logger), so the
difference is what the trainer costs; comparing attention implementations shows what attention
costs inside a real model.

With ``profile``, a few more steps run under torch.profiler: the row gains the GPU busy time per
step (sum of kernel times; far below ``step_ms`` means the GPU waits on the CPU) and the kernels
that take the most GPU time.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from fa_train.bench.attention import _check_list
from fa_train.bench.common import (RunOptions, environment, free_memory, is_oom, make_progress,
                                   resolve_device, short_reason, synchronize)
from fa_train.bench.report import Table, write_reports
from fa_train.metrics.flops import gpu_peak_flops, transformer_flops_per_token
from fa_train.models.gpt import LOSS_IMPLS
from fa_train.models.layer_norm import AUTO_WIDTH, IMPLS as NORM_IMPLS
from fa_train.tasks.base import check_compile_mode

MODELS = ("gpt2-small", "gpt2-medium", "gpt2-large")
IMPLS = ("standard", "sdpa", "flash")
RUNNERS = ("bare", "trainer")
OPTIMIZER = {"name": "adamw", "lr": 6e-4, "betas": (0.9, 0.95), "weight_decay": 0.1}
AUTOCAST = {"bf16": torch.bfloat16, "fp32": None}  # fp16 needs loss scaling: use the trainer


@dataclass
class TrainStepBenchConfig(RunOptions):
    models: list = field(default_factory=lambda: ["gpt2-small"])
    impls: list = field(default_factory=lambda: list(IMPLS))
    compile: list = field(default_factory=lambda: [0, 1])
    runners: list = field(default_factory=lambda: ["bare"])
    losses: list = field(default_factory=lambda: ["auto"])  # GPT loss_impl: auto, fused, torch
    norms: list = field(default_factory=lambda: ["auto"])   # GPT norm_impl: auto, fused, torch
    batch: int = 16
    seqlen: int = 1024
    vocab_size: int = 50257
    steps: int = 20
    warmup_steps: int = 5
    profile: bool = False
    dtype: str = "bf16"
    compile_mode: str = "default"

    def validate(self):
        self.models = _check_list("models", self.models, allowed=MODELS)
        self.impls = _check_list("impls", self.impls, allowed=IMPLS)
        self.compile = [int(c) for c in _check_list("compile", self.compile, allowed=(0, 1))]
        self.runners = _check_list("runners", self.runners, allowed=RUNNERS)
        self.losses = _check_list("losses", self.losses, allowed=LOSS_IMPLS)
        self.norms = _check_list("norms", self.norms, allowed=NORM_IMPLS)
        for name in ("batch", "seqlen", "vocab_size", "steps", "warmup_steps"):
            _check_list(name, [getattr(self, name)], positive=True)
        if self.dtype not in AUTOCAST:
            raise ValueError(f"dtype must be one of {sorted(AUTOCAST)} (fp16 needs loss scaling: "
                             f"use fa-train), got {self.dtype!r}")
        check_compile_mode(self.compile_mode, "compile_mode")
        resolve_device(self.device)
        return self


def _model(config, model_name, impl, loss, norm, device):
    from fa_train.models import GPT
    torch.manual_seed(config.seed)
    return GPT(preset=model_name, vocab_size=config.vocab_size, max_seq_len=config.seqlen,
               dropout=0.0, attention={"impl": impl}, loss_impl=loss, norm_impl=norm).to(device)


def _batch(config):
    gen = torch.Generator().manual_seed(config.seed)
    tokens = torch.randint(0, config.vocab_size, (config.batch, config.seqlen + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _build(config, model, compiled, device):
    from fa_train.tasks.optim import build_optimizer
    opt = build_optimizer(model, **OPTIMIZER, fused=device.type == "cuda")
    forward = torch.compile(model, mode=config.compile_mode) if compiled else model
    dtype = AUTOCAST[config.dtype]

    def step(x, y):
        if compiled:  # a new iteration for CUDA graphs (reduce-overhead); a no-op otherwise
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = forward(x, targets=y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().clone()  # CUDA graphs reuse their output buffers

    return step


def _run_bare(config, model, compiled, device):
    """(tokens/s, first loss, last loss, step, x, y) of the bare training loop."""
    step = _build(config, model, compiled, device)
    x, y = (t.to(device) for t in _batch(config))
    first = step(x, y)
    for _ in range(config.warmup_steps - 1):
        step(x, y)
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(config.steps):
        last = step(x, y)
    synchronize(device)
    tps = config.batch * config.seqlen * config.steps / (time.perf_counter() - start)
    return tps, float(first), float(last), step, x, y


def _run_trainer(config, model, compiled, device):
    """(tokens/s, first loss, last loss) of the same model and batch through the trainer."""
    import tempfile

    import lightning as L
    from torch.utils.data import DataLoader

    from fa_train.callbacks import LossHistory, PerfMonitor, ProgressBar
    from fa_train.tasks import LanguageModelingTask
    x, y = _batch(config)  # on the host: the trainer moves every batch, as in real runs
    batches = [{"input_ids": x, "labels": y}] * (config.warmup_steps + config.steps)
    task = LanguageModelingTask(model, optimizer=dict(OPTIMIZER, fused=device.type == "cuda"),
                                compile=bool(compiled), compile_mode=config.compile_mode)
    perf, history = PerfMonitor(warmup_steps=config.warmup_steps), LossHistory()
    with tempfile.TemporaryDirectory() as logs:
        trainer = L.Trainer(
            accelerator=device.type, devices=1, max_steps=len(batches), gradient_clip_val=1.0,
            precision="bf16-mixed" if AUTOCAST[config.dtype] else "32-true",
            logger=L.pytorch.loggers.CSVLogger(logs), enable_checkpointing=False,
            enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
            callbacks=[perf, history] + ([ProgressBar(refresh_rate=10)] if config.progress
                                         else []), enable_progress_bar=config.progress)
        trainer.fit(task, DataLoader(batches, batch_size=None))
    losses = [loss for _, loss in history.train]
    return perf.summary["tokens_per_sec_per_device"], losses[0], losses[-1]


def gpu_busy(step, *args, steps=3, top=20):
    """GPU busy ms per call of step(*args) and the `top` kernels by GPU time, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(*args)
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    busy = sum(e.self_device_time_total for e in kernels) / 1e3 / steps
    heaviest = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:top]
    return busy, [{"kernel": e.key[:90], "ms_per_step": e.self_device_time_total / 1e3 / steps,
                   "calls_per_step": e.count / steps} for e in heaviest]


def measure_case(config, model_name, impl, compiled, device, runner="bare", loss="auto",
                 norm="auto"):
    """One row: tokens/s, step time, MFU and peak memory over `steps` timed optimizer steps."""
    row = {"bench": "train_step", "model": model_name, "impl": impl, "compile": compiled,
           "compile_mode": config.compile_mode if compiled else None, "runner": runner,
           "loss": loss, "norm": norm, "batch": config.batch, "seqlen": config.seqlen,
           "dtype": config.dtype, "steps": config.steps}
    torch._dynamo.reset()
    free_memory(device)
    try:
        model = _model(config, model_name, impl, loss, norm, device)
        if runner == "bare":
            tps, first, last, step, x, y = _run_bare(config, model, bool(compiled), device)
        else:
            tps, first, last = _run_trainer(config, model, bool(compiled), device)
    except Exception as exc:  # noqa: BLE001 - a failed case is a result, not a crash
        free_memory(device)
        return row | {"status": "OOM" if is_oom(exc) else "error", "reason": short_reason(exc)}
    shape = model.flops_shape()
    fpt = transformer_flops_per_token(seq_len=config.seqlen, **shape)
    row |= {"status": "ok", "step_ms": config.batch * config.seqlen / tps * 1e3,
            "tokens_per_s": tps, "flops_per_token": fpt, "loss_first": first, "loss_last": last,
            "n_params": shape["n_params"]}
    if device.type == "cuda":
        peak = gpu_peak_flops(torch.cuda.get_device_name(device))
        row |= {"peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                "mfu": tps * fpt / peak if peak else None}
        if config.profile and runner == "bare":
            row["gpu_busy_ms"], row["top_kernels"] = gpu_busy(step, x, y)
    free_memory(device)
    return row


def run_train_step_bench(config):
    if isinstance(config, dict):
        config = TrainStepBenchConfig(**config)
    config.validate()
    device = resolve_device(config.device)
    cases = [(m, i, c, r, loss, norm) for m in config.models for c in config.compile
             for r in config.runners for loss in config.losses for norm in config.norms
             for i in config.impls]
    rows = []
    with make_progress(config.progress, len(cases), "train-step") as bar:
        for model_name, impl, compiled, runner, loss, norm in cases:
            bar.describe(f"{model_name} {impl} compile={compiled} {runner} loss={loss} norm={norm}")
            rows.append(measure_case(config, model_name, impl, compiled, device, runner, loss,
                                     norm))
            bar.advance()
    return rows


_CASE = ("model", "compile", "runner", "loss", "norm")
TRAIN_STEP_TABLES = (
    Table("Training throughput, tokens/s", _CASE, "impl", "tokens_per_s", ",.0f"),
    Table("MFU (6P + 12·L·H·Q·T FLOPs per token)", _CASE, "impl", "mfu", ".1%"),
    Table("Step time, ms", _CASE, "impl", "step_ms", ".1f"),
    Table("GPU busy time per step, ms (profiler, bare runner)", _CASE, "impl", "gpu_busy_ms",
          ".1f"),
    Table("Peak memory, GiB", _CASE, "impl", "peak_mem_gib", ".1f"),
)


def _kernel_notes(rows):
    notes = []
    for r in rows:
        if r.get("top_kernels"):
            notes += [f"**Top kernels, {r['model']} {r['impl']} compile={r['compile']} "
                      f"loss={r.get('loss', 'auto')} norm={r.get('norm', 'auto')}** "
                      f"(ms per step, calls per step):", ""]
            notes += [f"- {k['ms_per_step']:.2f} ms, {k['calls_per_step']:.0f}× `{k['kernel']}`"
                      for k in r["top_kernels"]]
            notes.append("")
    return notes


def write_train_step_reports(rows, out_dir, config, name="train_step"):
    if isinstance(config, dict):
        config = TrainStepBenchConfig(**config)
    notes = [f"Batch {config.batch} x seqlen {config.seqlen}, {config.dtype} autocast, AdamW "
             f"(fused on CUDA), gradient clipping 1.0, dropout 0, random tokens; "
             f"{config.warmup_steps} warm-up steps (compilation) then {config.steps} timed steps; "
             f"torch.compile mode {config.compile_mode!r}. Loss auto: the fused cross-entropy "
             "kernel on CUDA (torch: PyTorch's loss). Norm auto: the LayerNorm kernels on CUDA "
             f"up to {AUTO_WIDTH} features (fused: always; torch: PyTorch's). Runner bare: the "
             "training loop alone; trainer: the same model and batch through the Lightning "
             "trainer with the project's callbacks.", ""]
    return write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                         asdict(config), TRAIN_STEP_TABLES, (), notes + _kernel_notes(rows))
