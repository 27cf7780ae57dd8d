"""Training entry point: ``fa-train [experiment=NAME] [overrides...]`` (Hydra) and ``train(cfg)``.

``fa-train`` with no arguments runs the default job (configs/experiment/default.yaml): a small GPT
on the offline English corpus, a few hundred steps on CPU in under three minutes.

Every run writes into ``outputs/<experiment>/<timestamp>/`` (under the repository root, or
$FA_TRAIN_ROOT): config.yaml (resolved), metrics.csv, metrics.json, checkpoints/last.ckpt and
loss_curve.png, and prints where they are.

Rules resolved here (documented in configs/):
- ``attention=auto`` (attention.impl: auto): flash on CUDA, sdpa on CPU.
- ``trainer.precision: auto``: bf16-mixed on a CUDA GPU that supports bf16, else 32-true.
- ``global_batch_size`` (null = no accumulation): accumulate_grad_batches =
  global_batch_size / (data.batch_size x devices x nodes), which must divide evenly.
- Model fields left null (vocab_size, num_classes, max_seq_len, pad_token_id, ...) are read from
  the datamodule's attributes of the same name.
- ``resume``: null (fresh), ``auto`` (the newest checkpoints/last.ckpt of this experiment), or a
  path to a .ckpt file or a run directory. Resuming continues at the same step with the same data
  position (fa_train.utils.resumable).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from fa_train.resources import config_dir, project_root
from fa_train.utils.provenance import git_commit

REPO_ROOT = project_root()
CONFIG_DIR = config_dir()

# datamodule attribute(s) that fill a model field left null
MODEL_FIELDS_FROM_DATA = {
    "vocab_size": ("vocab_size",),
    "num_classes": ("num_classes",),
    "max_seq_len": ("seq_len", "max_seq_len", "max_length"),
    "pad_token_id": ("pad_token_id", "pad_id"),
    "image_size": ("image_size", "resolution"),
    "multi_label": ("multilabel", "multi_label"),
    "num_towers": ("num_towers",),
}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _to_container(cfg):
    from omegaconf import OmegaConf
    return OmegaConf.to_container(cfg, resolve=True)


def is_oom(exc: BaseException) -> bool:
    import torch
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in str(exc).lower() or isinstance(exc, MemoryError))


PRECISION_ALIASES = {"fp16-mixed": "16-mixed", "fp16": "16-mixed", "bf16": "bf16-mixed",
                     "fp32": "32-true", "32": "32-true", 32: "32-true", 16: "16-mixed"}


def resolve_precision(precision):
    """auto -> bf16-mixed on a bf16-capable CUDA GPU, else 32-true; fp16-mixed -> 16-mixed
    (fp16 autocast with dynamic loss scaling); other Lightning values pass through."""
    import torch
    if precision in (None, "auto"):
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16-mixed"
        return "32-true"
    return PRECISION_ALIASES.get(precision, precision)


def find_resume_checkpoint(resume, output_dir: Path) -> str | None:
    """null -> None; 'auto' -> newest <experiment>/*/checkpoints/last.ckpt (None if none);
    a .ckpt path or run directory -> that checkpoint (error naming the path if missing)."""
    if resume in (None, "", False, "none", "null"):
        return None
    if str(resume) == "auto":
        exp_dir = output_dir.parent
        cands = [p for p in exp_dir.glob("*/checkpoints/last.ckpt")
                 if p.parent.parent.resolve() != output_dir.resolve()]
        if not cands:
            print(f"[fa-train] resume=auto: no checkpoint under {exp_dir}, starting fresh")
            return None
        return str(max(cands, key=lambda p: p.stat().st_mtime))
    p = Path(str(resume)).expanduser()
    if p.is_dir():
        p = p / "checkpoints" / "last.ckpt"
    if not p.is_file():
        raise FileNotFoundError(f"resume checkpoint not found: {p}")
    return str(p)


def resolve_output_dir(cfg) -> Path:
    """cfg.paths.output_dir, or (outside a Hydra run, e.g. a config from the compose API)
    <paths.log_dir>/<experiment_name>/<timestamp>, written back into cfg."""
    from omegaconf import open_dict
    try:
        out = cfg.paths.output_dir
    except Exception:  # ${hydra:runtime.output_dir} without a Hydra run
        out = None
    if not out:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        out = str(Path(cfg.paths.log_dir) / str(cfg.get("experiment_name") or "run") / stamp)
    out = Path(out).expanduser().resolve()
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    return out


def _fill_model_from_data(cfg, dm):
    """Model fields set to null are read from the datamodule (after setup if needed)."""
    from omegaconf import open_dict
    missing = [k for k in MODEL_FIELDS_FROM_DATA if k in cfg.model and cfg.model[k] is None]
    if not missing:
        return

    def lookup(key):
        for attr in MODEL_FIELDS_FROM_DATA[key]:
            val = getattr(dm, attr, None)
            if val is not None:
                return val
        return None

    if any(lookup(k) is None for k in missing) and hasattr(dm, "prepare_data"):
        dm.prepare_data()
        dm.setup("fit")
    with open_dict(cfg):
        for k in missing:
            val = lookup(k)
            if val is None and k in ("vocab_size", "num_classes"):
                raise ValueError(f"model.{k} is null and the datamodule "
                                 f"({type(dm).__name__}) has no attribute {k}; set model.{k}")
            if val is not None:
                cfg.model[k] = val.item() if hasattr(val, "item") else val


def load_init_weights(model, path):
    """Initialize model weights from a checkpoint (Lightning .ckpt or a plain state dict), e.g.
    Path-64 -> Path-X: learned 2D position grids are interpolated to the new image size."""
    import torch
    from fa_train.models.classifier import SequenceClassifier, load_with_position_interpolation
    p = Path(str(path)).expanduser()
    if p.is_dir():
        p = p / "checkpoints" / "last.ckpt"
    if not p.is_file():
        raise FileNotFoundError(f"init_from checkpoint not found: {p}")
    state = torch.load(p, map_location="cpu", weights_only=False)
    sd = state.get("state_dict", state)
    sd = {k[len("model."):] if k.startswith("model.") else k: v for k, v in sd.items()}
    if isinstance(model, SequenceClassifier):
        load_with_position_interpolation(model, sd)
    else:
        model.load_state_dict(sd)
    print(f"[fa-train] initialized model weights from {p}")


def _make_loader_resumable(dm, trainer, seed):
    from fa_train.utils.resumable import ResumableLoader
    original = dm.train_dataloader

    def train_dataloader():
        loader = original()
        if not ResumableLoader.supports(loader):
            return loader
        wrapped = ResumableLoader(loader, seed=seed, rank=trainer.global_rank,
                                  world_size=trainer.world_size)
        wrapped.trainer = trainer
        return wrapped

    dm.train_dataloader = train_dataloader


def _final_checkpoint_callback_cls():
    import lightning as L

    class FinalCheckpoint(L.Callback):
        """Saves checkpoints/last.ckpt inside the last training step (max_steps reached), where
        Lightning's loop state still says "mid-epoch, batch k": resuming from it continues at the
        same step and data position. (A save after fit() would record the epoch as finished.)"""

        def __init__(self, path):
            self.path, self.saved = Path(path), False

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.max_steps and trainer.max_steps > 0 and \
                    trainer.global_step >= trainer.max_steps and not self.saved:
                trainer.save_checkpoint(self.path)
                self.saved = True

    return FinalCheckpoint


def _FinalCheckpoint(path):
    return _final_checkpoint_callback_cls()(path)


def plot_loss_curve(history, path: Path, title: str = "") -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return False
    train, val = history.train, history.val
    if not train and not val:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], label="train loss", lw=1.2)
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", label="val loss", lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _scalar(v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _write_json(path: Path, data: dict):
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------
def train(cfg) -> dict:
    """Run one training job from a composed config; returns the metrics written to metrics.json.

    metrics.json keys: status ("ok" | "oom" | "failed"), error, experiment, attention (resolved),
    model, n_params, seq_len, batch_size, global_batch_size, accumulate_grad_batches, devices,
    precision, global_step, epoch, wall_time_s, train_loss_first, train_loss_last, loss_start,
    loss_end, every logged final metric (val/loss, val/ppl, val/acc, test/..., ...),
    tokens_per_sec_per_device (rank 0's), tokens_per_sec (that times world_size), world_size, mfu,
    peak_memory_gib, flops_per_token, git_commit (the code's commit), output_dir, checkpoint.
    """
    import lightning as L
    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf, open_dict

    from fa_train.callbacks import LossHistory, PerfMonitor

    import warnings
    warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    warnings.filterwarnings("ignore", message=".*litlogger.*")
    if any("wandb" in str((c or {}).get("_target_", "")).lower()
           for c in (cfg.get("logger") or {}).values()):
        os.environ.setdefault("WANDB_MODE", "offline")  # never the network

    t_start = time.time()
    out_dir = resolve_output_dir(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out_dir / "checkpoints"
    metrics_path = out_dir / "metrics.json"
    metrics: dict[str, Any] = {
        "status": "running", "error": None,
        "experiment": cfg.get("experiment_name"),
        "git_commit": git_commit(),
        "output_dir": str(out_dir),
    }
    history = LossHistory()
    perf = None
    trainer = None
    fit_metrics: dict = {}
    exc_to_raise = None
    try:
        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        if cfg.get("float32_matmul_precision") and torch.cuda.is_available():  # TF32 on GPUs
            torch.set_float32_matmul_precision(str(cfg.float32_matmul_precision))
        L.seed_everything(int(cfg.seed), workers=True)
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        dm = instantiate(cfg.data, _convert_="all")
        _fill_model_from_data(cfg, dm)
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

        model = instantiate(cfg.model, _convert_="all")
        if cfg.get("init_from"):
            load_init_weights(model, cfg.init_from)
        task = instantiate(cfg.task, model=model, _convert_="all")

        callbacks = [instantiate(c, _convert_="all")
                     for c in (cfg.get("callbacks") or {}).values() if c is not None]
        perf = next((c for c in callbacks if isinstance(c, PerfMonitor)), None)
        if perf is None:
            perf = PerfMonitor()
            callbacks.append(perf)
        callbacks.append(history)
        final_ckpt = _FinalCheckpoint(ckpt_dir / "last.ckpt")
        callbacks.append(final_ckpt)
        loggers = [instantiate(c, _convert_="all")
                   for c in (cfg.get("logger") or {}).values() if c is not None]

        tcfg = OmegaConf.to_container(cfg.trainer, resolve=True)
        tcfg["precision"] = resolve_precision(tcfg.get("precision"))
        trainer = instantiate(tcfg, callbacks=callbacks, logger=loggers or False,
                              default_root_dir=str(out_dir), _convert_="all")

        devices = trainer.num_devices * trainer.num_nodes
        micro = int(cfg.data.batch_size)
        accum = 1
        gbs = cfg.get("global_batch_size")
        if gbs:
            if gbs % (micro * devices):
                raise ValueError(f"global_batch_size {gbs} is not divisible by data.batch_size "
                                 f"({micro}) x devices ({devices})")
            accum = gbs // (micro * devices)
        trainer.accumulate_grad_batches = accum

        _make_loader_resumable(dm, trainer, int(cfg.seed))
        ckpt_path = find_resume_checkpoint(cfg.get("resume"), out_dir)
        device = trainer.strategy.root_device
        metrics.update({
            "attention": model.attention.resolved(device) if hasattr(model, "attention") else None,
            "model": cfg.model.get("_target_"),
            "n_params": sum(p.numel() for p in model.parameters()),
            "seq_len": cfg.data.get("seq_len"),
            "batch_size": micro,
            "global_batch_size": micro * devices * accum,
            "accumulate_grad_batches": accum,
            "devices": devices,
            "precision": str(tcfg["precision"]),
            "resumed_from": ckpt_path,
        })
        if trainer.is_global_zero:
            print(f"[fa-train] experiment={metrics['experiment']} attention={metrics['attention']}"
                  f" params={metrics['n_params'] / 1e6:.2f}M device={device} "
                  f"precision={metrics['precision']} output_dir={out_dir}")

        trainer.fit(task, datamodule=dm, ckpt_path=ckpt_path)
        if not final_ckpt.saved:  # epoch-based end (or stopped early): save after fit
            trainer.save_checkpoint(ckpt_dir / "last.ckpt")
        metrics["checkpoint"] = str(ckpt_dir / "last.ckpt")
        fit_metrics.update(trainer.callback_metrics)
        if cfg.get("run_test") and _has_loader(dm, "test_dataloader"):
            trainer.test(task, datamodule=dm, verbose=False)
        metrics["status"] = "ok"
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised unless OOM
        if is_oom(exc):
            metrics["status"] = "oom"
            metrics["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        else:
            metrics["status"] = "failed"
            metrics["error"] = f"{type(exc).__name__}: {exc}"
            metrics["traceback"] = traceback.format_exc()[-6000:]
            exc_to_raise = exc
    finally:
        metrics["wall_time_s"] = round(time.time() - t_start, 3)
        if trainer is not None:
            metrics["global_step"] = trainer.global_step
            metrics["epoch"] = trainer.current_epoch
            for k, v in {**fit_metrics, **trainer.callback_metrics}.items():
                if k.startswith("perf/"):  # the PerfMonitor summary below has them unprefixed
                    continue
                s = _scalar(v)
                if s is not None:
                    metrics[k] = s
        if perf is not None:
            metrics.update(perf.summary)
            if trainer is not None and perf.summary.get("tokens_per_sec_per_device"):
                metrics["world_size"] = trainer.world_size
                metrics["tokens_per_sec"] = (perf.summary["tokens_per_sec_per_device"]
                                             * trainer.world_size)
        if metrics.get("attention") == "blocksparse":
            from fa_train.attention.dispatch import LAYOUT_STATS
            metrics.update(LAYOUT_STATS)
        metrics.setdefault("tokens_per_sec_per_device", None)
        metrics.setdefault("mfu", None)
        metrics.setdefault("peak_memory_gib", None)
        tr = history.train
        if tr:
            k = min(10, len(tr))
            metrics["train_loss_first"] = tr[0][1]
            metrics["train_loss_last"] = tr[-1][1]
            metrics["loss_start"] = sum(v for _, v in tr[:k]) / k   # mean of first 10 steps
            metrics["loss_end"] = sum(v for _, v in tr[-k:]) / k    # mean of last 10 steps
        is_zero = trainer is None or trainer.is_global_zero
        if is_zero:
            out_dir.mkdir(parents=True, exist_ok=True)
            if plot_loss_curve(history, out_dir / "loss_curve.png",
                               title=str(metrics.get("experiment") or "")):
                metrics["loss_curve"] = str(out_dir / "loss_curve.png")
            metrics["metrics_csv"] = str(out_dir / "metrics.csv")
            _write_json(metrics_path, metrics)
            _print_summary(metrics, out_dir)
    if exc_to_raise is not None:
        raise exc_to_raise
    return metrics


def _has_loader(dm, name):
    try:
        from lightning.pytorch.utilities.model_helpers import is_overridden
        return is_overridden(name, dm)
    except Exception:  # pragma: no cover
        return hasattr(dm, name)


def _print_summary(m: dict, out_dir: Path):
    keys = ["status", "global_step", "loss_start", "loss_end", "val/loss", "val/ppl", "val/acc",
            "tokens_per_sec_per_device", "mfu", "peak_memory_gib", "wall_time_s"]
    parts = []
    for k in keys:
        v = m.get(k)
        if v is None:
            continue
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    print("[fa-train] " + " ".join(parts))
    if m.get("error"):
        print(f"[fa-train] error: {m['error'][:500]}")
    print(f"[fa-train] outputs in {out_dir}")
    for name in ("config.yaml", "metrics.json", "metrics.csv", "checkpoints/last.ckpt",
                 "loss_curve.png"):
        if (out_dir / name).exists():
            print(f"[fa-train]   {out_dir / name}")


# ----------------------------------------------------------------------------------------------
# Hydra entry
# ----------------------------------------------------------------------------------------------
def _hydra_task(cfg):
    metrics = train(cfg)
    if metrics.get("status") not in ("ok", "oom"):
        sys.exit(1)
    return metrics.get(cfg.get("optimized_metric") or "val/loss")


def group_choices(group: str) -> list[str]:
    """Options of a config group (recursive: experiment choices look like 'gpt2/small-flash')."""
    d = CONFIG_DIR / group
    return sorted(str(p.relative_to(d).with_suffix("")) for p in d.rglob("*.yaml"))


def check_group_overrides(argv) -> None:
    """Fail fast on `group=NAME` with an unknown NAME, listing every valid choice (Hydra's own
    message lists only the top level of nested groups such as experiment/)."""
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, val = arg.split("=", 1)
        key = key.lstrip("+~")
        if not key or key.startswith("hydra") or "." in key or not (CONFIG_DIR / key).is_dir():
            continue
        choices = group_choices(key)
        for v in val.split(","):  # multirun sweeps: a,b,c
            v = v.strip()
            if not v or v == "null" or "(" in v or v in choices:
                continue
            raise SystemExit(f"fa-train: unknown {key} {v!r}; valid choices for {key}=:\n  "
                             + "\n  ".join(choices))


def main():
    """Console script ``fa-train``: Hydra over the package's configs/, from any cwd.
    ``--version`` prints the environment report; a user error prints one line (``--debug``: the
    traceback)."""
    import hydra

    from fa_train.errors import check_run_config, exit_on_user_error, run_hydra_app, take_debug_flag
    argv, debug = take_debug_flag(sys.argv[1:])
    sys.argv = [sys.argv[0], *argv]
    if "--version" in argv:
        from fa_train.envreport import print_report
        sys.exit(print_report())
    os.environ.setdefault("FA_TRAIN_ROOT", str(REPO_ROOT))
    check_group_overrides(argv)

    @exit_on_user_error("fa-train", debug)
    def task(cfg):
        check_run_config(cfg)
        return _hydra_task(cfg)

    run_hydra_app("fa-train", hydra.main(config_path=str(CONFIG_DIR), config_name="config",
                                         version_base="1.3")(task), debug)


if __name__ == "__main__":
    main()
