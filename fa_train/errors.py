"""User errors: bad input named in one line, and the entry-point wrapper that prints them.

A ``UserError`` is raised where input enters (config values in the model, data and task
constructors, CLI arguments, data files); the console scripts print it as ``PROG: error: MESSAGE``
and exit with status 2 (so do a missing file and a full disk, whose messages name the path).
``HYDRA_FULL_ERROR=1`` or ``--debug`` shows the full traceback instead. Anything else is a bug and
keeps its traceback.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import importlib
import math
import os
import re
import sys
from typing import Any, Callable

USER_ERROR_EXIT = 2
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DEBUG_FLAG = "--debug"

# logger target (a substring of its _target_) -> (module it needs, the extra that installs it)
LOGGER_PACKAGES = {"WandbLogger": ("wandb", "wandb"), "TensorBoardLogger": ("tensorboard", "tensorboard")}


def is_oom(exc: BaseException) -> bool:
    """True for CUDA out-of-memory errors, host MemoryError and any error whose message says "out
    of memory" (allocators of other backends, kernels that catch and re-raise)."""
    import torch
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return "out of memory" in str(exc).lower()


class UserError(ValueError):
    """Bad input from the user: a config value, a CLI argument or a data file. One line, no traceback."""


class PreparationPaused(Exception):
    """Data preparation stopped at the run's pause time (``pause_at``) before training began; what
    it finished is kept and the next start continues from there."""


def check_int(key: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in [low, high]; else UserError naming ``key`` and the valid range."""
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, int) or value < low \
            or (high is not None and value > high):
        raise UserError(f"{key}={value!r} is invalid: expected an integer {bound}")
    return value


def check_float(key: str, value: Any, low: float, high: float = math.inf, *,
                low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite-or-bounded float in the interval given; else a UserError naming it."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    ok = not (isinstance(value, bool) or math.isnan(x)) and (x > low if low_open else x >= low) \
        and (x < high if high_open else x <= high)
    if not ok:
        raise UserError(f"{key}={value!r} is invalid: expected a number in {interval}")
    return x


def check_choice(key: str, value: Any, choices) -> Any:
    if value not in choices:
        raise UserError(f"{key}={value!r} is invalid: expected one of {', '.join(map(str, choices))}")
    return value


def check_bool(key: str, value: Any) -> bool:
    """``value`` if it is true or false; else a UserError naming ``key`` (a string such as 'maybe'
    would otherwise read as true)."""
    if not isinstance(value, bool):
        raise UserError(f"{key}={value!r} is invalid: expected true or false")
    return value


def check_flags(prefix: str, config: Any) -> None:
    """check_bool for every bool field of the dataclass ``config``, named ``prefix.field``."""
    for f in dataclasses.fields(config):
        if f.type in (bool, "bool"):
            check_bool(f"{prefix}.{f.name}", getattr(config, f.name))


def check_model_shape(n_layer: int, n_head: int, d_model: int, **dims: int) -> None:
    """Transformer sizes as configured under ``model.``: positive integers, d_model divisible by n_head."""
    for key, value in {"n_layer": n_layer, "n_head": n_head, "d_model": d_model, **dims}.items():
        check_int(f"model.{key}", value)
    if d_model % n_head:
        raise UserError(f"model.d_model={d_model} is invalid: expected a value divisible by "
                        f"model.n_head={n_head}")


def check_loader_config(batch_size: int, eval_batch_size: int | None, num_workers: int) -> None:
    """The data loader keys every datamodule takes (data.batch_size, ...)."""
    check_int("data.batch_size", batch_size)
    if eval_batch_size is not None:
        check_int("data.eval_batch_size", eval_batch_size)
    check_int("data.num_workers", num_workers, low=0)


def check_run_config(cfg) -> None:
    """The run-level keys that no constructor sees: trainer step/epoch counts, validation interval
    and gradient clipping, run_test, global batch size, seed, threads, pause_after, pause_at, and the
    optional packages the chosen loggers need."""
    trainer = cfg.get("trainer") or {}
    for key in ("max_steps", "max_epochs"):
        value = trainer.get(key)
        if value is not None and value != -1:
            check_int(f"trainer.{key}", value, low=1)
    interval = trainer.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool):
        check_int("trainer.val_check_interval", interval)  # Lightning takes 0 and divides by it
    clip = trainer.get("gradient_clip_val")
    if clip is not None:  # a negative norm would flip the gradients
        check_float("trainer.gradient_clip_val", clip, 0.0)
    if "run_test" in cfg:
        check_bool("run_test", cfg["run_test"])
    if cfg.get("global_batch_size") is not None:
        check_int("global_batch_size", cfg.global_batch_size)
    if "seed" in cfg:
        check_int("seed", cfg.seed, low=0, high=2**32 - 1)
    if cfg.get("threads") is not None:
        check_int("threads", cfg.threads)
    for key, what in (("pause_after", "a positive number of minutes"),
                      ("pause_at", "a Unix time in seconds")):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0):
            raise UserError(f"{key} must be {what} (or null), got {value!r}")
    for name, logger in (cfg.get("logger") or {}).items():
        target = str((logger or {}).get("_target_", ""))
        for cls, (module, extra) in LOGGER_PACKAGES.items():
            if cls in target and not _importable(module):
                raise UserError(f"logger={name} needs the {module} package: "
                                f"pip install 'fa-train[{extra}]'")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def user_message(exc: BaseException | None) -> str | None:
    """The one-line message for an exception the user can act on, or None for a bug. Looks at
    ``exc`` and its __cause__/__context__ chain for a UserError, a missing file (FileNotFoundError),
    a full disk (ENOSPC, EDQUOT) or a Hydra error (an unknown key, a bad override; a constructor's
    own error, as ``<config node>: <its message>``)."""
    from hydra.errors import CompactHydraException, InstantiationException

    chain = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for err in chain:
        if isinstance(err, (UserError, FileNotFoundError)):
            return str(err)
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            return f"{os.strerror(err.errno).lower()} writing {err.filename}"
    for err in chain:
        if isinstance(err, InstantiationException) and err.__cause__ is not None:
            group = re.search(r"full_key: (\S+)", str(err))  # the config node that failed
            return " ".join(f"{group[1] + ': ' if group else ''}{err.__cause__}".split())
        if isinstance(err, CompactHydraException):
            return " ".join(f"{err} {err.__cause__ or ''}".split())
    return None


def take_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """argv without ``--debug``, and whether tracebacks are wanted (--debug or HYDRA_FULL_ERROR=1)."""
    debug = DEBUG_FLAG in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    return [a for a in argv if a != DEBUG_FLAG], debug


def exit_on_user_error(prog: str, debug: bool) -> Callable:
    """Decorator for an entry point: an error the user can act on (`user_message`) becomes
    ``PROG: error: MESSAGE`` on stderr and exit status 2, unless ``debug``; every other exception
    propagates unchanged."""
    def wrap(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - filtered below, re-raised otherwise
                message = user_message(exc)
                if message is None or debug:
                    raise
                print(f"{prog}: error: {message}", file=sys.stderr)
                sys.exit(USER_ERROR_EXIT)
        return wrapped
    return wrap


def run_hydra_app(prog: str, app: Callable[[], Any], debug: bool) -> Any:
    """Run a ``@hydra.main`` app so that errors Hydra raises itself (composing the config, writing
    the run folder's .hydra/) reach `exit_on_user_error` too: Hydra otherwise prints them with a
    traceback of its own. HYDRA_FULL_ERROR is set for the call and restored afterwards."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return exit_on_user_error(prog, debug)(app)()
    finally:
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
