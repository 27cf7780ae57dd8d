"""Training entry point: ``fa-train [experiment=NAME] [overrides...]`` (Hydra) and ``train(cfg)``.

``fa-train`` with no arguments runs the default job (configs/experiment/default.yaml): a small GPT
on the offline English corpus, a few hundred steps on CPU in under three minutes.

Every run writes into its own folder ``outputs/<experiment>/<run id>/`` (under the repository root,
or $FA_TRAIN_ROOT; see fa_train.utils.run_dir): config.yaml (resolved), metrics.csv, metrics.json,
checkpoints/last.ckpt and loss_curve.png, and prints where they are; a run with val/acc also
checkpoints/best_weights.pt, and its test split is tested at both the final and those weights.

Rules resolved here (documented in configs/):
- ``attention=auto`` (attention.impl: auto): flash on CUDA, sdpa on CPU.
- ``trainer.precision: auto``: bf16-mixed on a CUDA GPU that supports bf16, else 32-true.
- ``global_batch_size`` (null = no accumulation): accumulate_grad_batches =
  global_batch_size / (data.batch_size x devices x nodes), which must divide evenly.
- Model arguments left null are filled from the datamodule's `DataSpec` (fa_train.data.spec).
- ``resume``: null, ``auto`` or a checkpoint / run folder (fa_train.utils.checkpoints); a resumed
  run continues in the folder of the run it resumes, at the same step and data position.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from fa_train.errors import UserError
from fa_train.resources import config_dir, project_root
from fa_train.utils.run_dir import register_resolver

REPO_ROOT = project_root()
CONFIG_DIR = config_dir()
PRECISION_ALIASES = {"fp16-mixed": "16-mixed", "fp16": "16-mixed", "bf16": "bf16-mixed",
                     "fp32": "32-true", "32": "32-true", 32: "32-true", 16: "16-mixed"}
register_resolver()


def train(cfg) -> dict:
    """Run one training job from a composed config; returns the metrics written to metrics.json
    (keys: fa_train.callbacks.run_record). Failures are recorded, then raised; out-of-memory
    is recorded as status "oom" and returned; a run stopped by ``pause_after`` / ``pause_at`` as
    "paused" (also when its data generation reaches ``pause_at``: PreparationPaused), one
    whose weights or loss stopped being finite as "diverged", a classifier whose body no longer
    gets any gradient as "stalled" (both stopped there, no test pass)."""
    from hydra.utils import instantiate

    from fa_train.callbacks import LossHistory, PauseAfter, RunRecord, StopOnDivergence, StopOnStall
    from fa_train.data.lm import TextDataModule
    from fa_train.models.loading import load_init_weights
    from fa_train.utils.checkpoints import checkpoint_step
    from fa_train.utils.csv_log import trim_after

    _quiet(cfg)
    out_dir, resume = open_run_dir(cfg)
    record = RunRecord(out_dir, experiment=cfg.get("experiment_name"),
                       resumed_from=str(resume.path) if resume else None)
    with record.capture():
        _configure_torch(cfg)
        _save_config(cfg, out_dir)
        dm = instantiate(cfg.data, _convert_="all")
        if cfg.get("pause_at") is not None and hasattr(dm, "prepare_deadline"):
            dm.prepare_deadline = float(cfg.pause_at)   # a long data generation pauses too
        spec = fill_model_from_data(cfg, dm)
        _save_config(cfg, out_dir)
        model = instantiate(cfg.model, _convert_="all")
        if cfg.get("init_from"):
            load_init_weights(model, cfg.init_from)
        task = instantiate(cfg.task, model=model, _convert_="all")
        history = LossHistory(out_dir / "loss_curve.png", title=str(cfg.get("experiment_name") or ""))
        extra = [history, record, StopOnDivergence(), StopOnStall()]
        if cfg.get("pause_after") is not None or cfg.get("pause_at") is not None:
            extra.append(PauseAfter(cfg.get("pause_after"), cfg.get("pause_at")))
        trainer, precision = build_trainer(cfg, out_dir, extra_callbacks=extra)
        accum = set_accumulation(trainer, int(cfg.data.batch_size), cfg.get("global_batch_size"))
        devices = trainer.num_devices * trainer.num_nodes
        device = trainer.strategy.root_device
        record.describe(
            trainer, model=cfg.model.get("_target_"), seq_len=spec.seq_len, devices=devices,
            attention=model.attention.resolved(device) if hasattr(model, "attention") else None,
            n_params=sum(p.numel() for p in model.parameters()), precision=precision,
            batch_size=int(cfg.data.batch_size), accumulate_grad_batches=accum,
            global_batch_size=int(cfg.data.batch_size) * devices * accum,
            token_cache=dm.data_dir.name if isinstance(dm, TextDataModule) else None)
        if trainer.is_global_zero:
            m = record.metrics
            print(f"[fa-train] experiment={m['experiment']} attention={m['attention']} "
                  f"params={m['n_params'] / 1e6:.2f}M device={device} precision={precision} "
                  f"output_dir={out_dir}")
        if resume is not None and resume.run_dir == out_dir and trainer.is_global_zero:
            trim_after(out_dir / "metrics.csv", checkpoint_step(resume.path))
        trainer.fit(task, datamodule=dm, ckpt_path=str(resume.path) if resume else None)
        stopped_early = record.paused() or record.stopped_early() is not None
        if cfg.get("run_test") and not stopped_early and _has_loader(dm, "test_dataloader"):
            trainer.test(task, datamodule=dm, verbose=False)
            test_at_best(trainer, task, dm)
    return record.metrics


# ---------------------------------------------------------------------------- the steps of train()
def open_run_dir(cfg):
    """(run folder, ResumePoint or None): the folder of the run being resumed (when the checkpoint
    sits in one: <run>/checkpoints/), else a new folder claimed for this run (cfg.paths.output_dir,
    or a default outside Hydra); written back into cfg.paths.output_dir."""
    from omegaconf import OmegaConf, open_dict

    from fa_train.utils.checkpoints import find_resume_checkpoint
    from fa_train.utils.run_dir import claim_run_dir, default_run_dir, enter_run_dir
    try:
        proposed = cfg.paths.output_dir
    except Exception:  # ${hydra:runtime.output_dir} without a Hydra run
        proposed = None
    proposed = Path(proposed or default_run_dir(cfg.paths.log_dir, cfg.get("experiment_name")))
    proposed = proposed.expanduser().resolve()
    current = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "data")}
    resume = find_resume_checkpoint(cfg.get("resume"), current, proposed.parent,
                                    log=lambda msg: print(f"[fa-train] {msg}"))
    continuing = resume is not None and resume.run_dir is not None
    out_dir = enter_run_dir(resume.run_dir) if continuing else claim_run_dir(proposed)
    with open_dict(cfg):
        cfg.paths.output_dir = str(out_dir)
    return out_dir, resume


def test_at_best(trainer, task, dm) -> None:
    """Test again at the weights of the best validation (BestWeights), logged as
    test_at_best_val/...; nothing when no best was saved."""
    import torch

    from fa_train.callbacks import BestWeights
    best = next((c for c in trainer.callbacks if isinstance(c, BestWeights)), None)
    if best is None or best.best_step is None or not best.path.is_file():
        return
    task.load_state_dict(torch.load(best.path, map_location="cpu")["state_dict"])
    task.test_stage = "test_at_best_val"
    trainer.test(task, datamodule=dm, verbose=False)


def fill_model_from_data(cfg, dm):
    """Fill the model arguments cfg.model leaves null from the datamodule's DataSpec."""
    from omegaconf import open_dict

    from fa_train.data.spec import datamodule_spec, model_args_from_spec
    spec = datamodule_spec(dm)
    args = model_args_from_spec(cfg.model, spec, type(dm).__name__,
                                str(cfg.model.get("_target_", "model")))
    with open_dict(cfg):
        for k, v in args.items():
            cfg.model[k] = v
    return spec


def build_trainer(cfg, out_dir: Path, extra_callbacks=()):
    """(Lightning Trainer from cfg.trainer with cfg.callbacks and cfg.logger, resolved precision)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from fa_train.callbacks import GpuNeighbours, PerfMonitor
    callbacks = [instantiate(c, _convert_="all") for c in (cfg.get("callbacks") or {}).values()
                 if c is not None]
    for always in (PerfMonitor, GpuNeighbours):
        if not any(isinstance(c, always) for c in callbacks):
            callbacks.append(always())
    loggers = [instantiate(c, _convert_="all") for c in (cfg.get("logger") or {}).values()
               if c is not None]
    tcfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    tcfg["precision"] = resolve_precision(tcfg.get("precision"))
    # extra callbacks first: the loss history must record a step before the checkpoint saves it
    node = OmegaConf.create({"trainer": tcfg}).trainer  # named "trainer" in errors
    trainer = instantiate(node, callbacks=list(extra_callbacks) + callbacks,
                          logger=loggers or False, default_root_dir=str(out_dir), _convert_="all")
    return trainer, str(tcfg["precision"])


def set_accumulation(trainer, micro_batch: int, global_batch_size) -> int:
    """accumulate_grad_batches from global_batch_size (null: 1); must divide evenly."""
    devices = trainer.num_devices * trainer.num_nodes
    accum = 1
    if global_batch_size:
        if global_batch_size % (micro_batch * devices):
            raise UserError(f"global_batch_size={global_batch_size} is invalid: expected a multiple "
                            f"of data.batch_size ({micro_batch}) x devices ({devices})")
        accum = global_batch_size // (micro_batch * devices)
    trainer.accumulate_grad_batches = accum
    return accum


def resolve_precision(precision):
    """auto -> bf16-mixed on a bf16-capable CUDA GPU, else 32-true; fp16-mixed -> 16-mixed
    (fp16 autocast with dynamic loss scaling); other Lightning values pass through."""
    import torch
    if precision in (None, "auto"):
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16-mixed"
        return "32-true"
    return PRECISION_ALIASES.get(precision, precision)


def _quiet(cfg) -> None:
    warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    warnings.filterwarnings("ignore", message=".*litlogger.*")
    if any("wandb" in str((c or {}).get("_target_", "")).lower()
           for c in (cfg.get("logger") or {}).values()):
        os.environ.setdefault("WANDB_MODE", "offline")  # never the network


def _configure_torch(cfg) -> None:
    import lightning as L
    import torch
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    if cfg.get("float32_matmul_precision") and torch.cuda.is_available():  # TF32 on GPUs
        torch.set_float32_matmul_precision(str(cfg.float32_matmul_precision))
    L.seed_everything(int(cfg.seed), workers=True)


def _save_config(cfg, out_dir: Path) -> None:
    from omegaconf import OmegaConf
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))


def _has_loader(dm, name):
    from lightning.pytorch.utilities.model_helpers import is_overridden
    return is_overridden(name, dm)


# ---------------------------------------------------------------------------------- Hydra entry
def _hydra_task(cfg):
    metrics = train(cfg)
    if metrics.get("status") not in ("ok", "oom", "paused", "diverged", "stalled"):
        sys.exit(1)
    return metrics.get(cfg.get("optimized_metric") or "val/loss")


def group_choices(group: str) -> list[str]:
    """Options of a config group (recursive: experiment choices look like 'gpt2/small')."""
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
