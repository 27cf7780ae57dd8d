"""Recipes: one YAML file per paper table or figure (recipes/*.yaml), loaded and checked here.

A recipe names its runs once and says, per scale, how to shrink or grow them::

    name: table2_gpt2                  # = the file's stem
    title: ...                         # one line
    description: ...                   # what the recipe reproduces, and what each scale measures
    runs:                              # every run the recipe knows, in report order
      - name: small-flash
        kind: train                    # `fa-train experiment=<experiment> <overrides>`
        experiment: gpt2/small         # configs/experiment/<experiment>.yaml
        overrides: {attention: flash, data.seq_len: 1024}   # the attention matrix: one run each
        labels: {model: GPT-2 small, impl: flash}   # free-form, used by reports and plots
        # init_from: small-pretrain    # start from an earlier run's final weights (transfer)
      - name: attention
        kind: bench                    # `fa-bench <subcommand> --out DIR <args>`
        subcommand: attention
        args: {impls: [standard, flash], seqlens: [128, 256]}
    scales:
      smoke: {hardware: ..., measures: ..., runs: [...], train_overrides: {...},
              bench_args: {...}, per_run: {small-flash: {overrides: {...}, args: {...}}},
              timeout_s: 600}
      gpu:   {...}
      full:  {..., borrows: {scale: gpu, runs: [...]}}   # reported from the gpu scale's folder,
                                                           # not run again (same overrides)
    metrics: {ppl: {keys: [val/ppl], unit: perplexity, fmt: ".2f"}}   # so_far: true also reads paused runs;
             # a time or rate (unit s, min, ms, .../s; MFU; or timed: true) is not read from a
             # run while it shared its GPU (fa-repro run --jobs); final_if_best_last: {curve,
             # keys} reads `keys` instead when `keys` are absent and the curve peaked at its end;
             # reach: {curve, at_least, x}: x where a curve first reached a level; reached:
             # {curve, at_least}: 1 if it did, 0 if a finished run never did (seeds' mean: share)
    paper: {source: ..., hardware: ..., label: ..., tables: {...}}   # the paper's numbers
    report: {tables: [...], plots: [...],                            # how to lay them beside ours
             claims: {...}}                 # paper.claims (sentences) vs ours: fa_train.repro.claims

Overrides merge in this order, later keys winning: run `overrides` / `args`, then the scale's
`train_overrides` / `bench_args`, then the scale's `per_run` entry for that run.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from fa_train.resources import config_dir, recipe_dir

SCALES = ("smoke", "gpu", "full")
RUN_KINDS = ("train", "bench")
BENCH_SUBCOMMANDS = ("attention", "blocksparse", "blocksize", "io")
REQUIRED_KEYS = ("name", "title", "description", "runs", "scales", "metrics", "paper", "report")
SCALE_KEYS = {"hardware", "measures", "runs", "train_overrides", "bench_args", "per_run",
              "timeout_s", "paper_settings", "borrows"}
SAME_RUN_KEYS = ("train_overrides", "bench_args")   # what a borrowed run's two scales must share
RUN_KEYS = {"name", "kind", "experiment", "overrides", "subcommand", "args", "labels", "timeout_s",
            "init_from"}
PAPER_REQUIRED = ("source", "label", "hardware", "tables")
CLAIM_DERIVES = ("crossover", "fastest", "oom")          # report.claims: fa_train.repro.claims
PLOT_TYPES = ("loss", "train_xy", "bench_xy", "by_position")   # report.plots: fa_train.repro.report
CLAIM_EXPECTS = ("at_least", "at_most", "between", "equals")


def recipes_dir() -> Path:
    """The recipes folder: $FA_RECIPES_DIR, else ./recipes, else the one beside this package."""
    env = os.environ.get("FA_RECIPES_DIR")
    if env:
        return Path(env)
    cwd = Path.cwd() / "recipes"
    return cwd if cwd.is_dir() else recipe_dir()


def experiments_dir() -> Path:
    cwd = Path.cwd() / "configs" / "experiment"
    return cwd if cwd.is_dir() else config_dir() / "experiment"


class RecipeError(ValueError):
    """A recipe file that does not follow the schema; the message names the file and the key."""


@dataclass
class Run:
    """One resolved run of a recipe at one scale: everything needed to execute it."""

    name: str
    kind: str
    experiment: str | None = None
    subcommand: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)   # Hydra key -> value (train)
    args: dict[str, Any] = field(default_factory=dict)        # flag -> value (bench)
    labels: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    init_from: str | None = None   # the run of this recipe whose final weights this one starts from
    env: dict[str, str] = field(default_factory=dict)         # extra environment of its process

    def hydra_overrides(self) -> list[str]:
        """`key=value` strings for Hydra, experiment first."""
        out = [f"experiment={self.experiment}"] if self.experiment else []
        return out + [f"{k}={format_override_value(v)}" for k, v in self.overrides.items()]

    def bench_argv(self) -> list[str]:
        """`--flag value` strings for fa-bench (lists comma-joined, true -> bare flag)."""
        argv: list[str] = []
        for key, value in self.args.items():
            flag = "--" + str(key).replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                argv.append(flag)
            elif isinstance(value, (list, tuple)):
                argv += [flag, ",".join(str(v) for v in value)]
            else:
                argv += [flag, str(value)]
        return argv

    def command(self, run_dir: Path | str) -> list[str]:
        """The command line that runs this run in a subprocess, writing into `run_dir`:
        `fa-train ...` / `fa-bench ...` as modules of this interpreter, so that it works where
        the package is on PYTHONPATH without console scripts (air-gapped GPU hosts)."""
        if self.kind == "train":
            return [sys.executable, "-m", "fa_train.train", *self.hydra_overrides(),
                    f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
        return [sys.executable, "-m", "fa_train.bench.cli", str(self.subcommand),
                "--out", str(run_dir), *self.bench_argv()]


def format_override_value(value: Any) -> str:
    """A Python/YAML value as Hydra override grammar."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_override_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_override_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if "${" in text:   # an interpolation: Hydra's grammar takes it unquoted
        return text
    if any(c in text for c in " ,:[]{}()'\"=") and not (text.startswith("'") or text.startswith('"')):
        return "'" + text.replace("'", "\\'") + "'"
    return text


@dataclass
class Recipe:
    """A loaded recipe file (the raw mapping is kept in `data`)."""

    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def title(self) -> str:
        return self.data["title"]

    @property
    def paper(self) -> dict[str, Any]:
        return self.data["paper"]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.data["metrics"]

    @property
    def report(self) -> dict[str, Any]:
        return self.data["report"]

    def scale(self, scale: str) -> dict[str, Any]:
        if scale not in self.data["scales"]:
            raise RecipeError(f"{self.path}: scale {scale!r} is not defined; "
                              f"choose one of {sorted(self.data['scales'])}")
        return self.data["scales"][scale]

    def run_names(self) -> list[str]:
        return [r["name"] for r in self.data["runs"]]

    def borrowed(self, scale: str) -> tuple[str | None, list[str]]:
        """(scale, runs) that `scale` reports from another scale's folder without running them
        (`borrows: {scale: gpu, runs: [...]}`: runs of the same settings at both scales)."""
        borrows = self.scale(scale).get("borrows") or {}
        return borrows.get("scale"), list(borrows.get("runs") or [])

    def scale_run_names(self, scale: str) -> list[str]:
        """The runs a scale executes (its `runs` list, else all), in recipe order."""
        chosen = self.scale(scale).get("runs")
        return [n for n in self.run_names() if chosen is None or n in chosen]

    def runs(self, scale: str, only: str | list[str] | None = None) -> list[Run]:
        """The runs of `scale` with every override merged, optionally only the named ones."""
        sc = self.scale(scale)
        names = self.scale_run_names(scale)
        if only is not None:
            wanted = [only] if isinstance(only, str) else list(only)
            unknown = [w for w in wanted if w not in names]
            if unknown:
                raise RecipeError(f"{self.name}: no run named {unknown} at scale {scale!r}; "
                                  f"runs: {names}")
            names = [n for n in names if n in wanted]
        per_run = sc.get("per_run") or {}
        out = []
        for raw in self.data["runs"]:
            if raw["name"] not in names:
                continue
            extra = per_run.get(raw["name"]) or {}
            if raw["kind"] == "train":
                overrides = {**(raw.get("overrides") or {}), **(sc.get("train_overrides") or {}),
                             **(extra.get("overrides") or {})}
                args = {}
            else:
                overrides = {}
                args = {**(raw.get("args") or {}), **(sc.get("bench_args") or {}),
                        **(extra.get("args") or {})}
            out.append(Run(
                name=raw["name"], kind=raw["kind"], experiment=raw.get("experiment"),
                subcommand=raw.get("subcommand"), overrides=overrides, args=args,
                labels=dict(raw.get("labels") or {}),
                timeout_s=extra.get("timeout_s", raw.get("timeout_s", sc.get("timeout_s"))),
                init_from=raw.get("init_from"),
            ))
        return out


def load_recipe(name_or_path: str | Path) -> Recipe:
    """Load and validate a recipe by path (`recipes/table3_lra.yaml`) or name (`table3_lra`)."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = recipes_dir() / f"{path.name}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in list_recipe_paths()) or "none"
        raise RecipeError(f"recipe {str(name_or_path)!r} not found (looked for {path}); "
                          f"known recipes: {known}")
    with open(path) as fh:
        data = yaml.safe_load(fh)
    recipe = Recipe(path=path, data=data)
    problems = validate_recipe(recipe)
    if problems:
        raise RecipeError(f"{path}: " + "; ".join(problems))
    return recipe


def list_recipe_paths(directory: Path | None = None) -> list[Path]:
    return sorted((directory or recipes_dir()).glob("*.yaml"))


def borrow_problems(where: str, scale: str, sc: dict[str, Any], scales: dict[str, Any],
                    names: list[str]) -> list[str]:
    """What is wrong with a scale's `borrows`: it must name another scale and runs that scale
    runs, this one does not, with the same overrides at both (SAME_RUN_KEYS, per_run)."""
    borrows = sc["borrows"]
    if not isinstance(borrows, dict) or set(borrows) != {"scale", "runs"} or not borrows["runs"]:
        return [f"{where}: borrows must be {{scale: SCALE, runs: [RUN, ...]}}"]
    other = scales.get(borrows["scale"])
    if borrows["scale"] == scale or not isinstance(other, dict):
        return [f"{where}: borrows.scale must be another scale of this recipe, "
                f"got {borrows['scale']!r}"]
    p = []
    theirs = set(other.get("runs") or names)
    ours = set(sc.get("runs") or names)
    for run in borrows["runs"]:
        if run not in theirs or run in ours:
            p.append(f"{where}: borrows run {run!r}, which scale {borrows['scale']!r} must run "
                     f"and this one must not")
        elif (sc.get("per_run") or {}).get(run) != (other.get("per_run") or {}).get(run):
            p.append(f"{where}: borrowed run {run!r} has other per_run overrides at the two scales")
    for key in SAME_RUN_KEYS:
        if sc.get(key) != other.get(key):
            p.append(f"{where}: borrows from {borrows['scale']!r}, whose {key} differ")
    return p


def validate_recipe(recipe: Recipe, check_experiments: bool = False) -> list[str]:
    """Schema problems of a recipe, as messages (empty when valid).

    With `check_experiments`, every train run's experiment must exist under configs/experiment/.
    """
    d = recipe.data
    if not isinstance(d, dict):
        return ["the file must hold a mapping"]
    p: list[str] = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in d]
    if p:
        return p
    if d["name"] != recipe.path.stem:
        p.append(f"name {d['name']!r} differs from the file stem {recipe.path.stem!r}")
    names: list[str] = []
    for i, run in enumerate(d["runs"] or []):
        where = f"runs[{i}]"
        if not isinstance(run, dict) or "name" not in run:
            p.append(f"{where}: needs a name")
            continue
        where = f"run {run['name']!r}"
        names.append(run["name"])
        extra = set(run) - RUN_KEYS
        if extra:
            p.append(f"{where}: unknown keys {sorted(extra)}; allowed {sorted(RUN_KEYS)}")
        kind = run.get("kind")
        if kind not in RUN_KINDS:
            p.append(f"{where}: kind {kind!r} must be one of {RUN_KINDS}")
        elif kind == "train":
            if not run.get("experiment"):
                p.append(f"{where}: a train run needs `experiment`")
            elif check_experiments and not (experiments_dir() / f"{run['experiment']}.yaml").exists():
                p.append(f"{where}: experiment {run['experiment']!r} not found under "
                         f"{experiments_dir()}")
        elif run.get("subcommand") not in BENCH_SUBCOMMANDS:
            p.append(f"{where}: subcommand {run.get('subcommand')!r} must be one of "
                     f"{BENCH_SUBCOMMANDS}")
        for key in ("overrides", "args", "labels"):
            if run.get(key) is not None and not isinstance(run[key], dict):
                p.append(f"{where}: `{key}` must be a mapping")
        source = run.get("init_from")
        if source is not None:
            earlier = {r.get("name"): r.get("kind") for r in d["runs"][:i] if isinstance(r, dict)}
            if kind != "train" or earlier.get(source) != "train":
                p.append(f"{where}: init_from must name an earlier train run of this recipe, "
                         f"got {source!r}")
    if not names:
        p.append("`runs` is empty")
    if len(set(names)) != len(names):
        p.append(f"duplicate run names: {sorted({n for n in names if names.count(n) > 1})}")
    scales = d["scales"] or {}
    for scale in SCALES:
        if scale not in scales:
            p.append(f"missing scale {scale!r}")
    for scale, sc in scales.items():
        where = f"scale {scale!r}"
        if scale not in SCALES:
            p.append(f"{where}: unknown scale; allowed {SCALES}")
            continue
        if not isinstance(sc, dict):
            p.append(f"{where}: must be a mapping")
            continue
        extra = set(sc) - SCALE_KEYS
        if extra:
            p.append(f"{where}: unknown keys {sorted(extra)}; allowed {sorted(SCALE_KEYS)}")
        for key in ("hardware", "measures"):
            if not sc.get(key):
                p.append(f"{where}: needs `{key}` (say what this scale runs on and measures)")
        for n in list(sc.get("runs") or []) + list(sc.get("per_run") or {}):
            if n not in names:
                p.append(f"{where}: refers to unknown run {n!r}")
        chosen = set(sc.get("runs") or names)
        for run in d["runs"] or []:
            if isinstance(run, dict) and run.get("name") in chosen and run.get("init_from") \
                    and run["init_from"] not in chosen:
                p.append(f"{where}: runs {run['name']!r} but not {run['init_from']!r}, "
                         f"whose weights it starts from")
        if sc.get("runs") is not None and not sc["runs"]:
            p.append(f"{where}: `runs` is empty")
        if "borrows" in sc:
            p += borrow_problems(where, scale, sc, scales, names)
    paper = d["paper"] or {}
    for key in PAPER_REQUIRED:
        if key not in paper:
            p.append(f"paper: missing {key!r}")
    if "label" in paper and "paper" not in str(paper["label"]).lower():
        p.append("paper.label must say these are the paper's numbers")
    for tid, table in (paper.get("tables") or {}).items():
        cols = table.get("columns") or []
        if not cols or not table.get("rows") or not table.get("unit"):
            p.append(f"paper.tables.{tid}: needs columns, rows and unit")
            continue
        for row, values in table["rows"].items():
            if len(values) != len(cols):
                p.append(f"paper.tables.{tid}.{row}: {len(values)} values for {len(cols)} columns")
            if not any(isinstance(v, (int, float)) for v in values):
                p.append(f"paper.tables.{tid}.{row}: no number")
    metric_names = set(d["metrics"] or {})
    for mname, spec in (d["metrics"] or {}).items():
        level = next((k for k in ("reach", "reached") if isinstance(spec, dict) and k in spec), None)
        if level:
            reach = spec[level]
            if not isinstance(reach, dict) or not {"curve", "at_least"} <= set(reach):
                p.append(f"metrics.{mname}.{level}: needs `curve` and `at_least` (and `x`)")
        elif not isinstance(spec, dict) or not spec.get("keys"):
            p.append(f"metrics.{mname}: needs `keys` (metrics.json keys or bench JSON fields),"
                     " `reach` (a metrics.csv curve and the level it must reach: when) or"
                     " `reached` (the same: whether, 1 or 0)")
    for i, table in enumerate((d["report"] or {}).get("tables") or []):
        tid = table.get("paper_table")
        if tid not in (paper.get("tables") or {}):
            p.append(f"report.tables[{i}]: paper_table {tid!r} is not in paper.tables")
            continue
        cols = paper["tables"][tid]["columns"]
        cols = cols + list(table.get("extra_columns") or [])
        for row, cells in (table.get("rows") or {}).items():
            if row not in paper["tables"][tid]["rows"] and not str(row).endswith("(ours only)"):
                p.append(f"report.tables[{i}]: row {row!r} is not a paper row "
                         f"(name extra rows '... (ours only)')")
            cells = cells if isinstance(cells, dict) else {c: cells for c in cols[:1]}
            for col, cell in cells.items():
                run = cell.get("run") if isinstance(cell, dict) else cell
                if col not in cols:
                    p.append(f"report.tables[{i}].{row}: unknown column {col!r}")
                for r in (run if isinstance(run, list) else [run]):   # a list: the seeds' mean
                    if r not in names:
                        p.append(f"report.tables[{i}].{row}.{col}: unknown run {r!r}")
        for col, spec in (table.get("columns") or {}).items():
            if col not in cols:
                p.append(f"report.tables[{i}].columns: unknown column {col!r}")
            if spec.get("metric") and spec["metric"] not in metric_names:
                p.append(f"report.tables[{i}].columns.{col}: unknown metric {spec['metric']!r}")
            if spec.get("derive") in ("curve_gap", "reach_ratio") and (
                    not spec.get("curve") or spec.get("baseline_row") not in (table.get("rows") or {})):
                p.append(f"report.tables[{i}].columns.{col}: {spec['derive']} needs `curve` (a "
                         f"metrics.csv column) and `baseline_row` (a row of this table)")
            if spec.get("derive") == "curve_gap" and spec.get("at", "widest") not in ("widest", "end"):
                p.append(f"report.tables[{i}].columns.{col}: curve_gap's `at` must be widest or end, "
                         f"got {spec['at']!r}")
    for i, plot in enumerate((d["report"] or {}).get("plots") or []):
        if plot.get("type") not in PLOT_TYPES:
            p.append(f"report.plots[{i}]: type must be one of {', '.join(PLOT_TYPES)}, got "
                     f"{plot.get('type')!r}")
        for key in ("y",):
            if plot.get(key) and plot[key] not in metric_names and plot.get("type") != "loss":
                p.append(f"report.plots[{i}]: unknown metric {plot[key]!r}")
        for run in list(plot.get("runs") or []) + [side.get("run") for side in plot.get("sides") or []]:
            if run not in names:
                p.append(f"report.plots[{i}]: unknown run {run!r}")
    return p + claims_problems(d, names)


def claims_problems(d: dict[str, Any], names: Any) -> list[str]:
    """What is wrong with the recipe's report.claims block (see fa_train.repro.claims)."""
    spec = (d.get("report") or {}).get("claims")
    if spec is None:
        return []
    n_claims = len((d.get("paper") or {}).get("claims") or [])
    tables = {t.get("paper_table"): t.get("rows") or {} for t in (d["report"].get("tables") or [])}
    p = []
    for key, row in (spec.get("rows") or {}).items():
        where = f"report.claims.rows.{key}"
        if not isinstance(key, int) or not 1 <= key <= n_claims:
            p.append(f"{where}: must be a claim number, 1 ... {n_claims} (paper.claims)")
            continue
        ours, expect = (row or {}).get("ours") or {}, (row or {}).get("expect") or {}
        if len(expect) > 1 or set(expect) - set(CLAIM_EXPECTS):
            p.append(f"{where}.expect: one of {', '.join(CLAIM_EXPECTS)}")
        if "table" in ours:
            if ours["table"] not in tables:
                p.append(f"{where}.ours: table {ours['table']!r} is not a report table's paper_table")
                continue
            for row_name in [ours["row"]] if "row" in ours else ours.get("rows") or []:
                if row_name not in tables[ours["table"]]:
                    p.append(f"{where}.ours: unknown row {row_name!r} of table {ours['table']!r}")
            continue
        if ours.get("derive") not in CLAIM_DERIVES:
            p.append(f"{where}.ours: needs `table` or a derive in {', '.join(CLAIM_DERIVES)}")
            continue
        if ours.get("metric") not in (d.get("metrics") or {}) or not ours.get("x"):
            p.append(f"{where}.ours: needs `metric` (a recipe metric) and `x` (a record field)")
        needed = ("sides", "at") if ours["derive"] == "oom" else ("subject", "rivals")
        if any(not ours.get(k) for k in needed):
            p.append(f"{where}.ours: {ours['derive']} needs {' and '.join(needed)}")
            continue
        sides = [ours["subject"]] if ours.get("subject") else []
        for side in sides + list(ours.get("rivals") or ours.get("sides") or []):
            if side.get("run") not in names:
                p.append(f"{where}.ours: unknown run {side.get('run')!r}")
    return p
