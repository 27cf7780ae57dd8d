"""Hydra configs: every experiment composes and resolves; bad names fail listing the choices."""
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from fa_train.train import CONFIG_DIR

EXPERIMENTS = sorted(
    str(p.relative_to(CONFIG_DIR / "experiment").with_suffix(""))
    for p in (CONFIG_DIR / "experiment").rglob("*.yaml"))

REQUIRED = ["default", "gpt2/small", "gpt2/medium", "gpt2/small-2k", "gpt2/small-4k", "bert/base",
            "bert/large", "longdoc/mimic", "longdoc/ecthr"] + [
    f"lra/{t}" for t in ("listops", "text", "retrieval", "image", "pathfinder32", "pathx", "path256")]
ATTENTION = ("standard", "sdpa", "flash", "blocksparse")


def compose_experiment(name, overrides=(), tmp="/tmp/fa-train-test"):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=[f"experiment={name}", f"paths.output_dir={tmp}",
                                            *overrides])


def test_required_experiments_exist():
    missing = sorted(set(REQUIRED) - set(EXPERIMENTS))
    assert not missing, f"missing experiment configs: {missing}"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_resolves(name):
    """Every experiment runs with every attention implementation and is named after it."""
    for impl in ATTENTION if name != "default" else ("auto",):
        container = OmegaConf.to_container(compose_experiment(name, [f"attention={impl}"]),
                                           resolve=True)
        assert container["experiment_name"] == (name if name == "default" else f"{name}-{impl}")
        for key in ("model", "data", "task", "trainer", "attention", "paths", "callbacks", "logger"):
            assert key in container, key
        assert container["model"]["attention"]["impl"] == container["attention"]["impl"] == impl
        for k in ("root_dir", "data_dir", "cache_dir", "output_dir", "log_dir"):
            assert container["paths"][k]


def test_no_eval_resolvers():
    for p in CONFIG_DIR.rglob("*.yaml"):
        assert "${eval:" not in p.read_text(), p


def test_default_is_the_cpu_job():
    cfg = compose_experiment("default")
    assert cfg.attention.impl == "auto" and cfg.data._target_.endswith("LMDataModule")
    assert cfg.trainer.max_steps <= 500 and cfg.model.n_layer <= 6


def test_unknown_experiment_lists_choices():
    from fa_train.train import check_group_overrides
    with pytest.raises(MissingConfigException):
        compose_experiment("gpt2/nope")
    with pytest.raises(SystemExit) as err:  # fa-train checks first and lists nested choices
        check_group_overrides(["experiment=gpt2/nope"])
    msg = str(err.value)
    assert "valid choices" in msg and "gpt2/small" in msg and "lra/pathx" in msg
    with pytest.raises(SystemExit, match="flashy"):
        check_group_overrides(["-m", "attention=sdpa,flashy"])
    check_group_overrides(["experiment=gpt2/small", "attention=sdpa,flash", "data.seq_len=3"])


def test_cli_unknown_experiment_exits_nonzero(tmp_path):
    exe = Path(sys.executable).with_name("fa-train")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fa_train.train"]
    out = subprocess.run(cmd + ["experiment=gpt2/nope"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "gpt2/small" in out.stderr


def test_unknown_attention_lists_choices():
    with pytest.raises(MissingConfigException) as err:
        compose_experiment("default", ["attention=flashy"])
    msg = str(err.value)
    for impl in ("standard", "sdpa", "flash", "blocksparse", "auto"):
        assert impl in msg


def test_cli_prints_composed_config_from_any_cwd(tmp_path):
    exe = Path(sys.executable).with_name("fa-train")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fa_train.train"]
    out = subprocess.run(cmd + ["--cfg", "job", "experiment=gpt2/small", "attention=flash"],
                         cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "experiment_name: gpt2/small-${attention.impl}" in out.stdout
    assert "impl: flash" in out.stdout


def test_distributed_trainer_configs_instantiate():
    from hydra.utils import instantiate
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    cfg = compose_experiment("gpt2/small", ["trainer=fsdp"])
    strategy = instantiate(cfg.trainer.strategy, _convert_="all")
    assert isinstance(strategy, FSDPStrategy)
    assert isinstance(strategy.kwargs["auto_wrap_policy"], ModuleWrapPolicy)
    from lightning.pytorch.strategies import DDPStrategy
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp = compose_experiment("default", ["trainer=ddp", "trainer.strategy.ddp_comm_hook.dtype=bf16"])
    strategy = instantiate(ddp.trainer.strategy, _convert_="all")
    assert isinstance(strategy, DDPStrategy)
    assert strategy._ddp_comm_hook is default_hooks.bf16_compress_hook
    assert strategy._ddp_kwargs["gradient_as_bucket_view"] is True
