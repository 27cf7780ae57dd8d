"""configs/data/lra_*.yaml and longdoc_*.yaml: targets exist, keys match the constructors,
and the generated tasks instantiate from their config (tiny sizes)."""
import inspect
from pathlib import Path

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs" / "data"
NAMES = ["lra_listops", "lra_text", "lra_retrieval", "lra_image", "lra_pathfinder32",
         "lra_pathfinder64", "lra_pathx", "lra_path256", "longdoc_mimic", "longdoc_ecthr"]


def _load(name, tmp_path):
    cfg = OmegaConf.load(CONFIG_DIR / f"{name}.yaml")
    root = OmegaConf.create({"paths": {"data_dir": str(tmp_path / "data"),
                                       "cache_dir": str(tmp_path / "cache")}, "seed": 3, "data": cfg})
    return root.data


@pytest.mark.parametrize("name", NAMES)
def test_config_keys_match_constructor(name, tmp_path):
    cfg = _load(name, tmp_path)
    cls = get_class(cfg._target_)
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "_target_"}
    sig = inspect.signature(cls.__init__)
    accepts_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    named = set(sig.parameters) - {"self", "kw", "kwargs"}
    bases = [c for c in cls.__mro__[1:] if "__init__" in vars(c)] if accepts_kw else []
    base = set().union(*(inspect.signature(c.__init__).parameters for c in bases))
    assert set(kwargs) <= named | base, set(kwargs) - named - base
    assert kwargs["seed"] == 3
    if "data_dir" in kwargs and kwargs["data_dir"] is not None:
        assert kwargs["data_dir"].startswith(str(tmp_path / "data"))


@pytest.mark.parametrize("name,res", [("lra_listops", None), ("lra_pathfinder32", 32)])
def test_generated_tasks_instantiate_from_config(name, res, tmp_path):
    cfg = _load(name, tmp_path)
    dm = instantiate(cfg, n_train=4, n_val=2, n_test=2, gen_workers=1, num_workers=0, batch_size=2)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.datasets["train"]) == 4
    assert str(dm._generated_dir()).startswith(str(tmp_path / "cache"))
    if res:
        assert dm.seq_len == res * res and dm.image_size == res
