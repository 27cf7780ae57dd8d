"""Every recipe file: schema, scales, paper numbers, experiments that exist, configs that compose."""
from pathlib import Path

import pytest
import yaml

from fa_train.repro.recipe import (SCALES, Recipe, Run, format_override_value, list_recipe_paths,
                                   load_recipe, validate_recipe)

REPO = Path(__file__).resolve().parents[3]
EXPECTED = {"table1_bert", "table2_gpt2", "table3_lra", "table4_gpt2_context", "table5_longdoc",
            "table6_pathx", "figure2_io", "figure3_attention", "context_sweep", "ddp_scaling",
            "pathfinder32_learning", "listops_plateau"}
RECIPES = list_recipe_paths(REPO / "recipes")


def test_every_table_and_figure_has_a_recipe():
    assert {p.stem for p in RECIPES} == EXPECTED


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_schema(path):
    recipe = load_recipe(path)     # raises RecipeError on any schema problem
    assert validate_recipe(recipe, check_experiments=True) == []
    paper = recipe.paper
    assert "paper" in paper["label"].lower() and "A100" in paper["hardware"]
    numbers = [v for t in paper["tables"].values() for row in t["rows"].values() for v in row
               if isinstance(v, (int, float))]
    assert numbers, "the paper's numbers must be in the recipe"
    for scale in SCALES:
        sc = recipe.scale(scale)
        assert sc["hardware"] and sc["measures"]
        assert recipe.runs(scale), scale
    smoke = recipe.runs("smoke")
    assert all(r.overrides.get("debug") == "smoke"  # configs/debug/smoke.yaml: on the CPU
               and r.overrides.get("trainer.accelerator", "cpu") == "cpu"
               for r in smoke if r.kind == "train")
    assert all(r.args.get("device") == "cpu" for r in smoke if r.kind == "bench")


def test_paper_numbers_match_the_paper():
    """Spot checks against the paper (Dao et al. 2022) (a typo here would mislead every report)."""
    t3 = load_recipe(REPO / "recipes/table3_lra.yaml").paper["tables"]["table3"]["rows"]
    assert t3["FlashAttention"] == [37.6, 63.9, 81.4, 43.5, 72.7, 59.8, 2.4]
    assert t3["Block-sparse FlashAttention"][-1] == 2.8
    t2 = load_recipe(REPO / "recipes/table2_gpt2.yaml").paper["tables"]["table2"]["rows"]
    assert t2["GPT-2 medium · FlashAttention"] == [14.3, 6.9, 3.0]
    t5 = load_recipe(REPO / "recipes/table5_longdoc.yaml").paper["tables"]["table5"]["rows"]
    assert t5["ECtHR"] == [72.2, 74.3, 77.1, 78.6, 80.7, 79.2]
    f2 = load_recipe(REPO / "recipes/figure2_io.yaml").paper["tables"]["figure2_left"]["rows"]
    assert f2 == {"Standard attention": [66.6, 40.3, 41.7], "FlashAttention": [75.2, 4.4, 7.3]}
    t6 = load_recipe(REPO / "recipes/table6_pathx.yaml").paper["tables"]["table6"]["rows"]
    assert t6["Block-sparse FlashAttention"] == [56.0, 63.1]


def test_context_sweep_covers_every_length_and_impl():
    recipe = load_recipe(REPO / "recipes/context_sweep.yaml")
    got = {(r.labels["impl"], r.overrides["data.seq_len"]) for r in recipe.runs("gpu")}
    assert got == {(i, 1024 * 2 ** k) for i in ("standard", "sdpa", "flash", "blocksparse")
                   for k in range(7)}
    assert all(r.overrides.get("attention") == "blocksparse" for r in recipe.runs("gpu")
               if r.labels["impl"] == "blocksparse")


def test_ddp_scaling_runs_one_and_two_processes_of_each_impl():
    recipe = load_recipe(REPO / "recipes/ddp_scaling.yaml")
    runs = {(r.labels["impl"], r.labels["gpus"]): r for r in recipe.runs("gpu")}
    assert set(runs) == {(i, g) for i in ("flash", "sdpa") for g in (1, 2)}
    for (impl, gpus), run in runs.items():
        assert run.overrides["trainer"] == ("gpu" if gpus == 1 else "ddp")
        assert run.overrides.get("trainer.devices", 1) == gpus
        assert run.experiment == "gpt2/small" and run.overrides["attention"] == impl


def _gpu_configs(name: str) -> dict:
    from hydra.core.global_hydra import GlobalHydra

    from fa_train.repro.runner import compose_train_config
    out = {}
    for run in load_recipe(REPO / f"recipes/{name}.yaml").runs("gpu"):
        try:
            out[run.name] = compose_train_config(run, "/tmp/fa-repro-compose")
        finally:
            GlobalHydra.instance().clear()
    return out


def _step_tokens(cfg) -> int:
    return (cfg.global_batch_size or cfg.data.batch_size) * cfg.data.seq_len


def _val_interval_tokens(cfg) -> int:  # val_check_interval counts micro-batches
    return cfg.trainer.val_check_interval * cfg.data.batch_size * cfg.data.seq_len


def test_lm_gpu_scales_compare_runs_on_equal_tokens():
    """The quality protocol of the LM recipes: every run of a recipe sees the same tokens per step,
    steps and validation interval (in tokens), on the large corpus, validated on the whole split."""
    for name, impls in (("table4_gpt2_context", None), ("table2_gpt2", {"standard", "flash"}),
                        ("table1_bert", {"standard", "flash"})):
        cfgs = _gpu_configs(name)
        shapes = {(_step_tokens(c), c.trainer.max_steps, _val_interval_tokens(c),
                   c.seed, c.data.source, c.trainer.limit_val_batches) for c in cfgs.values()}
        assert len(shapes) == 1 and next(iter(shapes))[4] == "large", (name, shapes)
        if impls:
            assert {c.attention.impl for c in cfgs.values()} == impls
    t4 = _gpu_configs("table4_gpt2_context")
    assert {c.data.seq_len for c in t4.values()} == {1024, 2048, 4096}
    assert t4["standard-1k"].attention.impl == "standard" and t4["standard-1k"].data.seq_len == 1024
    assert all(c.model.dropout == 0.0 for c in _gpu_configs("table2_gpt2").values())


def test_every_train_run_composes_at_every_scale():
    """Hydra composes each run's experiment + merged overrides: unknown keys fail here, not on a GPU."""
    from hydra.core.global_hydra import GlobalHydra

    from fa_train.repro.runner import compose_train_config
    failures, seen = [], set()
    for path in RECIPES:
        recipe = load_recipe(path)
        for scale in SCALES:
            for run in recipe.runs(scale):
                # one composition per experiment and set of override keys (the sweeps differ
                # only in values): 165 runs, about 50 compositions
                key = (run.experiment, tuple(sorted(run.overrides)))
                if run.kind != "train" or key in seen:
                    continue
                seen.add(key)
                try:
                    cfg = compose_train_config(run, "/tmp/fa-repro-compose")
                    for key, value in run.overrides.items():
                        if "." in key and value is not None and not str(value).startswith("${"):
                            node = cfg
                            for part in key.split("."):
                                node = node[part]
                            assert node == value, (key, node, value)
                except Exception as exc:  # noqa: BLE001 - collect them all
                    failures.append(f"{recipe.name}/{scale}/{run.name}: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0][:200]}")
                finally:
                    GlobalHydra.instance().clear()
    assert not failures, "\n".join(failures)


def test_merge_order_and_commands(tmp_path):
    data = yaml.safe_load("""
name: r
title: t
description: d
runs:
  - {name: a, kind: train, experiment: gpt2/small, overrides: {data.seq_len: 1024, x: 1}}
  - {name: b, kind: bench, subcommand: attention, args: {impls: [flash, standard], padding: true, dropout: 0.1}}
scales:
  smoke: {hardware: cpu, measures: m, train_overrides: {x: 2, y: 3}, bench_args: {device: cpu},
          per_run: {a: {overrides: {y: 4}}, b: {args: {padding: false}}}}
  gpu: {hardware: g, measures: m, runs: [a]}
  full: {hardware: f, measures: m}
metrics: {m: {keys: [k]}}
paper: {source: s, label: "paper's", hardware: A100, tables: {t: {columns: [c], unit: u, rows: {r: [1.0]}}}}
report: {tables: [], plots: []}
""")
    recipe = Recipe(path=tmp_path / "r.yaml", data=data)
    assert validate_recipe(recipe) == []
    a, b = recipe.runs("smoke")
    assert a.overrides == {"data.seq_len": 1024, "x": 2, "y": 4}
    assert a.command(tmp_path / "a")[1:3] == ["-m", "fa_train.train"]
    assert a.command(tmp_path / "a")[3:] == ["experiment=gpt2/small", "data.seq_len=1024",
                                             "x=2", "y=4", f"hydra.run.dir={tmp_path / 'a'}",
                                             "hydra.output_subdir=null"]
    assert b.command("OUT")[3:] == ["attention", "--out", "OUT", "--impls", "flash,standard",
                                    "--dropout", "0.1", "--device", "cpu"]
    assert [r.name for r in recipe.runs("gpu")] == ["a"]
    with pytest.raises(ValueError, match="no run named"):
        recipe.runs("gpu", only="b")


def test_validation_names_the_problem(tmp_path):
    bad = Recipe(path=tmp_path / "x.yaml", data={"name": "y", "title": "t", "description": "d",
                 "runs": [{"name": "a", "kind": "train"}], "scales": {"smoke": {}},
                 "metrics": {}, "paper": {"label": "ours"},
                 "report": {"plots": [{"type": "bench_xy", "runs": ["a", "b"],
                                       "sides": [{"run": "a"}, {"run": "c"}]}]}})
    problems = " | ".join(validate_recipe(bad))
    for expected in ("differs from the file stem", "needs `experiment`", "missing scale 'gpu'",
                     "needs `hardware`", "paper: missing 'source'", "must say these are the paper",
                     "report.plots[0]: unknown run 'b'", "report.plots[0]: unknown run 'c'"):
        assert expected in problems


@pytest.mark.parametrize("value, text", [(True, "true"), (None, "null"), ([1, 2], "[1,2]"),
                                         ("a b", "'a b'"), ("${paths.root_dir}/x", "${paths.root_dir}/x"),
                                         (0.1, "0.1")])
def test_override_values(value, text):
    assert format_override_value(value) == text


def test_run_defaults():
    run = Run(name="n", kind="train", experiment="e")
    assert run.hydra_overrides() == ["experiment=e"]
