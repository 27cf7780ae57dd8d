"""Optimizers and learning-rate schedules built from config.

optimizer: {name: adamw|adam|lamb, lr, betas, eps, weight_decay, fused}
scheduler: {name: cosine|linear|constant|rsqrt|none, warmup_steps, total_steps, min_lr_ratio}

Schedules are multipliers of ``optimizer.lr`` stepped every optimizer step:
- cosine / linear: linear warmup, then decay to ``min_lr_ratio`` at ``total_steps``.
- rsqrt: the LRA form ``lr * min(1, step/warmup) / sqrt(max(step, warmup))`` ("0.05 rsqrt" = lr 0.05).
- constant: warmup, then flat.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import torch

from fa_train.errors import UserError, check_choice, check_float, check_int

SCHEDULES = ("cosine", "linear", "constant", "rsqrt", "none")
OPTIMIZERS = ("adamw", "adam", "lamb")


def lr_multiplier(step: int, name: str, warmup_steps: int = 0, total_steps: int | None = None,
                  min_lr_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate after ``step`` optimizer steps."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown scheduler {name!r}; valid choices: {list(SCHEDULES)}")
    if name == "none":
        return 1.0
    if name == "rsqrt":
        w = max(1, warmup_steps)
        s = max(step, 1)
        return min(1.0, s / w) / math.sqrt(max(s, w))
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if name == "constant" or not total_steps or total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if name == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        decay = 1.0 - progress
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019): Adam moments with a per-tensor trust ratio ||w|| / ||update||.

    On a GPU each step is two Triton kernels over all of a group's tensors (kernels/lamb.py: 10
    passes over the parameters' memory instead of 31); elsewhere multi-tensor (foreach) ops. A
    per-tensor Python loop costs about 15 ops per tensor, which for BERT-large's ~400 tensors took
    longer on the host than the model's step on the GPU."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update(group, params)
        return loss

    def _update(self, group, params):
        b1, b2 = group["betas"]
        states = [self.state[p] for p in params]
        for p, state in zip(params, states):
            if not state:
                state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
            state["step"] += 1
        grads = [p.grad for p in params]
        m, v = [s["m"] for s in states], [s["v"] for s in states]
        steps = {s["step"] for s in states}
        if params[0].is_cuda and len(steps) == 1:
            from kernels import lamb as fused_lamb  # Triton: only on this path
            if fused_lamb.supports(params, grads, m, v):
                fused_lamb.lamb_step(params, grads, m, v, group["lr"], group["betas"],
                                     group["eps"], group["weight_decay"], steps.pop())
                return
        torch._foreach_mul_(m, b1)
        torch._foreach_add_(m, grads, alpha=1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
        denom = torch._foreach_div(v, [1 - b2 ** s["step"] for s in states])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(m, [1 - b1 ** s["step"] for s in states])
        torch._foreach_div_(update, denom)
        if group["weight_decay"]:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])
        w_norm = torch.stack(torch._foreach_norm(params))
        u_norm = torch.stack(torch._foreach_norm(update))
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        torch._foreach_mul_(update, list(trust.unbind()))
        torch._foreach_add_(params, update, alpha=-group["lr"])


def check_optim_config(optimizer: Mapping, scheduler: Mapping) -> None:
    """task.optimizer and task.scheduler as configured: known names, lr > 0, betas in [0, 1), ..."""
    check_choice("task.optimizer.name", optimizer.get("name", "adamw"), OPTIMIZERS)
    check_float("task.optimizer.lr", optimizer.get("lr", 1e-3), 0.0, low_open=True)
    betas = optimizer.get("betas")
    if betas is not None:
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise UserError(f"task.optimizer.betas={betas!r} is invalid: expected a pair "
                            "[beta1, beta2] of numbers in [0, 1)")
        for i, beta in enumerate(betas):
            check_float(f"task.optimizer.betas[{i}]", beta, 0.0, 1.0, high_open=True)
    if optimizer.get("eps") is not None:
        check_float("task.optimizer.eps", optimizer["eps"], 0.0, low_open=True)
    if optimizer.get("weight_decay") is not None:
        check_float("task.optimizer.weight_decay", optimizer["weight_decay"], 0.0)
    check_choice("task.scheduler.name", scheduler.get("name", "none"), SCHEDULES)
    if scheduler.get("total_steps") is not None:
        check_int("task.scheduler.total_steps", scheduler["total_steps"])
    if scheduler.get("warmup_steps") is not None:
        check_int("task.scheduler.warmup_steps", scheduler["warmup_steps"], low=0)
    if scheduler.get("min_lr_ratio") is not None:
        check_float("task.scheduler.min_lr_ratio", scheduler["min_lr_ratio"], 0.0, 1.0)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only (not biases, norms, embeddings' positions are matrices too)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(params: Iterable | torch.nn.Module, name: str = "adamw", lr: float = 1e-3,
                    betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                    fused: bool | None = None) -> torch.optim.Optimizer:
    if isinstance(params, torch.nn.Module):
        params = param_groups(params, weight_decay)
    betas = tuple(betas)
    if name == "adamw":
        kw = {}
        if fused is None:
            fused = torch.cuda.is_available()
        if fused:
            kw["fused"] = True
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    if name == "lamb":
        return Lamb(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; valid choices: {list(OPTIMIZERS)}")
