"""The `smoke` scale of every recipe, actually run on CPU, then reported.

Runs go in-process (no ~5 s interpreter start per run) when there is no GPU; with a GPU they go
through the subprocess executor so that TRITON_INTERPRET=1 reaches the CPU-only children without
touching this process's kernels. All smoke scales together are sized to stay under ~2 minutes on
2 CPU cores once the offline corpus and tokenizers are cached (first use prepares them).
"""
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from rich.console import Console

from fa_train.repro.recipe import list_recipe_paths, load_recipe
from fa_train.repro.report import render_report
from fa_train.repro.runner import InProcessExecutor, SubprocessExecutor, run_recipe

REPO = Path(__file__).resolve().parents[3]
RECIPES = list_recipe_paths(REPO / "recipes")
SMOKE_STEPS = OmegaConf.load(REPO / "configs" / "debug" / "smoke.yaml").trainer.max_steps


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # numpy, inside the Triton interpreter
@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_smoke_scale_runs_on_cpu(path, tmp_path):
    recipe = load_recipe(path)
    out = tmp_path / recipe.name
    executor = SubprocessExecutor() if torch.cuda.is_available() else InProcessExecutor()
    log = tmp_path / "console.log"
    data = run_recipe(recipe, "smoke", out, executor=executor,
                      console=Console(file=open(log, "w"), width=160))
    runs = data["runs"]
    assert set(runs) == set(recipe.scale_run_names("smoke"))
    bad = {name: (e["status"], e.get("error"), e.get("output_tail", "")[-1500:])
           for name, e in runs.items() if e["status"] != "ok"}
    assert not bad, json.dumps(bad, indent=1)
    for name, entry in runs.items():
        if entry["kind"] == "train":
            assert entry["metrics"]["status"] == "ok"
            assert entry["metrics"]["global_step"] == entry["overrides"].get("trainer.max_steps",
                                                                            SMOKE_STEPS)
            assert (out / name / "metrics.csv.gz").exists()    # finished: kept compressed
            # deleted after the run, or a transfer's source's once the transfer is done too
            assert not (out / name / "checkpoints").exists()
        else:
            assert any(isinstance(v, dict) and v.get("rows") for v in entry["metrics"].values())
    text = render_report(recipe, "smoke", out).read_text()
    assert "ours (smoke)" in text and "paper" in text
