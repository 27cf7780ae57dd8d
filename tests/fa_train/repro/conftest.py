"""Fixtures for fa_train.repro tests: a small recipe written to tmp_path."""
import textwrap

import pytest

from fa_train.repro.recipe import load_recipe

MINI_RECIPE = textwrap.dedent("""
    name: mini
    title: "Mini — a recipe for tests"
    description: two train runs and one bench run
    runs:
      - {name: base, kind: train, experiment: gpt2/small, overrides: {attention: standard}, labels: {impl: standard, seq_len: 1024}}
      - {name: fast, kind: train, experiment: gpt2/small, overrides: {attention: flash}, labels: {impl: flash, seq_len: 1024}}
      - {name: bench, kind: bench, subcommand: attention, args: {impls: [standard, flash]}}
    scales:
      smoke: {hardware: "CPU", measures: "wiring", train_overrides: {trainer.max_steps: 2}}
      gpu: {hardware: "one GPU", measures: "speed", train_overrides: {trainer.max_steps: 100}}
      full: {hardware: "8x A100", measures: "the paper's", paper_settings: "400K steps"}
    metrics:
      ppl: {keys: [val/ppl], unit: perplexity, fmt: ".2f"}
      tps: {keys: [tokens_per_sec_per_device], unit: tokens/s, fmt: ",.0f"}
      ms: {keys: [ms], unit: ms, fmt: ".1f", where: {pass: fwd+bwd}}
      mem: {keys: [peak_mem_gib], unit: GiB, fmt: ".2f", where: {pass: fwd+bwd}}
    paper:
      source: "a test"
      label: "paper's numbers"
      hardware: "8x A100"
      tables:
        t:
          caption: "Table T"
          unit: "perplexity; ×"
          columns: [ppl, speedup]
          units: {speedup: "×"}
          rows:
            Baseline: [18.2, 1.0]
            Flash: [18.1, 3.5]
            Other: [20.0, 2.0]
        r:
          caption: "Ratios"
          unit: "×"
          columns: [speed ratio]
          rows: {Flash: [3]}
    report:
      tables:
        - paper_table: t
          rows:
            Baseline: base
            Flash: fast
            "Extra (ours only)": base
          columns:
            ppl: {metric: ppl}
            speedup: {derive: ratio, metric: tps, baseline_row: Baseline}
            tokens/s: {metric: tps}
          extra_columns: [tokens/s]
        - paper_table: r
          rows: {Flash: bench}
          columns:
            speed ratio: {derive: record_ratio, run: bench, metric: ms, num: {impl: standard},
                          den: {impl: flash}, join: [seqlen], agg: max}
      plots:
        - {type: loss, title: "loss curves", file: loss.png}
        - {type: train_xy, title: "tps vs N", file: tps.png, x_label: seq_len, y: tps, group_label: impl}
        - {type: bench_xy, title: "runtime vs N", file: runtime.png, run: bench, x: seqlen, y: ms, group: impl, logx: true}
""")


@pytest.fixture
def make_recipe(tmp_path):
    """A loaded recipe from YAML text, written to tmp_path/recipes/<name>.yaml."""
    def make(name, text):
        path = tmp_path / "recipes" / f"{name}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return load_recipe(path)
    return make


@pytest.fixture
def mini_recipe(make_recipe):
    return make_recipe("mini", MINI_RECIPE)


@pytest.fixture
def ordered(mini_recipe):
    """The mini recipe with two claims over several rows of its table."""
    mini_recipe.data["paper"]["claims"] = ["Flash has the lower perplexity.", "Flash is faster."]
    mini_recipe.data["report"]["claims"] = {"rows": {
        1: {"ours": {"table": "t", "rows": ["Flash", "Baseline"], "column": "ppl"},
            "expect": {"equals": True}},
        2: {"ours": {"table": "t", "rows": ["Baseline", "Flash"], "column": "speedup"},
            "expect": {"equals": True}}}}
    return mini_recipe
