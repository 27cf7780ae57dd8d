"""Render report.md (+ PNG plots) for one recipe output folder: the paper's numbers beside ours.

Every number of ours comes from a file a run wrote (results.json, which holds each run's
metrics.json / bench JSON, and the runs' metrics.csv); the paper's come from the recipe's `paper:`
block. Nothing is typed by hand here.

Recipe `report:` block::

    report:
      tables:
        - paper_table: ppl                  # a key of paper.tables: the table's shape
          rows:                             # paper row -> the run filling it (all columns) ...
            "GPT-2 small · FlashAttention": small-flash
            # ... or column -> run / {run: R, where: {field: value}} (bench records)
          columns:                          # column -> how our value is computed
            ppl: {metric: ppl}
            speedup: {derive: ratio, metric: tokens_per_s, baseline_row: "GPT-2 small · HuggingFace"}
            Avg: {derive: mean, of: [ListOps, Text]}
            loss gap: {derive: curve_gap, curve: train/loss, baseline_row: "GPT-2 small · HuggingFace"}
            to each level: {derive: reach_ratio, curve: val/acc, baseline_row: ...}   # time ratio
          extra_columns: [tokens/s]         # ours only; their spec is under `columns`
      plots:
        - {type: loss, title: ..., runs: [...]}                          # metrics.csv curves
        - {type: train_xy, x_label: seq_len, y: tokens_per_s, group_label: impl}
        - {type: bench_xy, run: attention, x: seqlen, y: fwd_bwd_ms, group: impl, logx: true}
        - {type: bench_xy, x: seqlen, y: fwd_bwd_ms, per: batch, sides: [{run: dense, label: impl},
           {run: sparse, where: {impl: blocksparse}, label: layout, legend: "{} (block-sparse)"}]}
      claims: {...}                         # paper.claims (sentences) vs ours: fa_train.repro.claims
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Iterable

from fa_train.repro.metrics_csv import (curve_points, nonfinite_from_step, read_loss_csv,
                                        seconds_per_step)
from fa_train.repro.recipe import Recipe
from fa_train.repro.runner import (RESULTS_FILE, STOPPED_EARLY, default_out_dir, load_json,
                                   planned_steps, shared_from_step, stopped_text)

MISSING = "–"


# ------------------------------------------------------------------------------------------------
# Reading our numbers
# ------------------------------------------------------------------------------------------------
def lookup(data: Any, key: str) -> Any:
    """`key` in a metrics mapping: exact ("val/ppl"), else nested by '/' or '.' ("perf.mfu")."""
    if not isinstance(data, dict):
        return None
    if key in data:
        return data[key]
    for sep in ("/", "."):
        if sep in key:
            head, rest = key.split(sep, 1)
            if head in data:
                found = lookup(data[head], rest)
                if found is not None:
                    return found
    return None


def bench_records(metrics: Any) -> list[dict[str, Any]]:
    """Every record (a flat dict with numbers) found in a bench run's JSON files."""
    out: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            lists = [v for v in node.values() if isinstance(v, list) and v and
                     all(isinstance(x, dict) for x in v)]
            if lists:
                for v in lists:
                    walk(v)
            elif any(isinstance(v, (int, float)) for v in node.values()):
                out.append(node)
            else:
                for v in node.values():
                    if isinstance(v, (dict, list)):
                        walk(v)

    walk(metrics)
    return out


def matches(record: dict[str, Any], where: dict[str, Any] | None) -> bool:
    for key, want in (where or {}).items():
        got = lookup(record, key)
        if isinstance(want, list):
            if got not in want and str(got) not in [str(w) for w in want]:
                return False
        elif got != want and str(got) != str(want):
            return False
    return True


class Ours:
    """Our results for one output folder: statuses, metrics and bench records by run name."""

    def __init__(self, recipe: Recipe, out_dir: Path):
        self.recipe = recipe
        self.out_dir = out_dir
        self.data = load_json(out_dir / RESULTS_FILE) or {"runs": {}}
        self.runs: dict[str, dict[str, Any]] = {
            name: self.settled(entry) for name, entry in self.data.get("runs", {}).items()}
        self.borrowed = self.borrow()

    def borrow(self) -> dict[str, str]:
        """Add the runs this folder's scale borrows (Recipe.borrowed) that it has not recorded
        itself, read from the other scale's folder beside it; return {run: that scale}."""
        scale = self.data.get("scale") or self.out_dir.name
        if scale not in (self.recipe.data.get("scales") or {}):
            return {}
        other, names = self.recipe.borrowed(scale)
        if other is None:
            return {}
        theirs = (load_json(self.out_dir.parent / other / RESULTS_FILE) or {}).get("runs", {})
        taken = {}
        for name in names:
            if name in theirs and name not in self.runs:
                entry = dict(theirs[name], run_dir=f"../{other}/{theirs[name].get('run_dir', name)}")
                self.runs[name] = self.settled(entry)
                taken[name] = other
        return taken

    def settled(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The entry as reported: a training run recorded ok whose training loss was not finite
        from some step to its end diverged there (`nonfinite_from_step` of its metrics.csv)."""
        metrics = entry.get("metrics") or {}
        last = metrics.get("train_loss_last")
        if entry.get("status") != "ok" or entry.get("kind") != "train" or \
                not isinstance(last, (int, float)) or math.isfinite(last):
            return entry
        step = nonfinite_from_step(self.out_dir / entry.get("run_dir", "") / "metrics.csv")
        if step is None:
            return entry
        return dict(entry, status="diverged", metrics=dict(metrics, diverged_at_step=step),
                    error=f"training loss not finite from step {step} on")

    def status(self, run: str) -> str:
        entry = self.runs.get(run)
        return entry.get("status", "?") if entry else "not run"

    def device(self, run: str) -> str | None:
        """The GPU (or device) a run reported: metrics.json's device for training runs, the
        environment's gpu/device for fa-bench files."""
        entry = self.runs.get(run) or {}
        metrics = entry.get("metrics") or {}
        if entry.get("kind") == "bench":
            for data in metrics.values():
                env = data.get("environment") if isinstance(data, dict) else None
                d = (env or {}).get("gpu") or (env or {}).get("device")
                if isinstance(d, str):
                    return d
            return None
        d = lookup(metrics, "device_name") or lookup(metrics, "device")
        return d if isinstance(d, str) else None

    def metric(self, run: str, metric: str, where: dict | None = None) -> float | None:
        """The value of recipe metric `metric` for `run` (None when absent or not ok; a metric
        marked `so_far: true`, measured while training, also from a paused run)."""
        entry = self.runs.get(run)
        spec = self.recipe.metrics[metric]
        if not entry or not readable(entry.get("status"), spec):
            return None
        values = self.values(entry, spec, where)
        if not values:
            return None
        agg = spec.get("agg", "first")
        value = {"first": values[0], "min": min(values), "max": max(values),
                 "mean": sum(values) / len(values)}[agg]
        return value * float(spec.get("scale", 1.0))

    def values(self, entry: dict[str, Any], spec: dict[str, Any], where: dict | None) -> list[float]:
        metrics = entry.get("metrics") or {}
        where = {**(spec.get("where") or {}), **(where or {})}
        if is_timed(spec) and "reach" not in spec and shared_from_step(entry) is not None:
            return []
        if entry.get("kind") == "bench":
            out = []
            for rec in bench_records(metrics):
                if matches(rec, where):
                    v = first_number(rec, spec["keys"])
                    if v is not None:
                        out.append(v)
            return out
        if "reach" in spec:
            value = self.time_to_reach(entry, spec["reach"])[0]
            return [] if value is None else [value]
        if "reached" in spec:   # 1 when the curve reached the level, 0 when a finished run never did
            value, why = self.time_to_reach(entry, dict(spec["reached"], x="step"))
            if value is not None:
                return [1.0]
            return [0.0] if why == "not reached" and entry.get("status") == "ok" else []
        v = first_number(metrics, spec["keys"])
        if v is None and "final_if_best_last" in spec:
            v = self.final_if_best_last(entry, spec["final_if_best_last"])
        return [] if v is None else [v]

    def final_if_best_last(self, entry: dict[str, Any], rule: dict[str, Any]) -> float | None:
        """The final weights' value (`rule`'s keys) of a run that recorded nothing at its best
        validation but whose highest `curve` value is its last row, logged at its final step and
        above every earlier one: its best weights are then its final weights. Else None."""
        metrics = entry.get("metrics") or {}
        points = curve_points(self.out_dir / entry.get("run_dir", "") / "metrics.csv",
                              rule["curve"], "step")
        final_step = first_number(metrics, ["global_step"])
        if not points or final_step is None or points[-1][0] + 1 < final_step:
            return None
        last = points[-1][2]
        if any(y >= last for _, _, y in points[:-1]):
            return None
        return first_number(metrics, rule["keys"])

    def time_to_reach(self, entry: dict[str, Any], reach: dict[str, Any]) -> tuple[float | None, str]:
        """(x at the first row of the run's metrics.csv whose `curve` is at least `at_least`, e.g.
        training seconds to a validation accuracy; else None and why: not reached, no curve, or
        a time measured while other runs shared the GPU)."""
        x_key = reach.get("x", "step")
        points = curve_points(self.out_dir / entry.get("run_dir", "") / "metrics.csv",
                              reach["curve"], x_key)
        if not points:
            return None, "no curve"
        step, x = next(((step, x) for step, x, y in points if y >= float(reach["at_least"])),
                       (None, None))
        if x is None:
            return None, "not reached"
        shared = shared_from_step(entry)
        if x_key != "step" and shared is not None and step >= shared:
            return None, SHARED_GPU
        return x, ""

    def curve(self, run: str, key: str, x_key: str = "step") -> dict[float, float]:
        """{x: value} of column `key` of the run's metrics.csv (up to where it stopped for a run
        paused, stalled or diverged; empty for the others that are not ok)."""
        entry = self.runs.get(run) or {}
        if entry.get("status") not in ("ok", "paused", *STOPPED_EARLY):
            return {}
        xs, ys = read_loss_csv(self.out_dir / entry.get("run_dir", run) / "metrics.csv", [key], x_key)
        return dict(zip(xs, ys))

    def records(self, run: str) -> list[dict[str, Any]]:
        entry = self.runs.get(run) or {}
        return bench_records(entry.get("metrics") or {}) if entry.get("status") == "ok" else []

    def cell(self, run: str, metric: str, where: dict | None = None) -> tuple[float | None, str]:
        """(value, text when there is no value: OOM, failed, not run...)."""
        value = self.metric(run, metric, where)
        if value is not None:
            return value, ""
        status, spec = self.status(run), self.recipe.metrics[metric]
        if "reach" in spec and readable(status, spec):
            value, why = self.time_to_reach(self.runs[run], spec["reach"])
            return value, (f"{why} (paused)" if status == "paused" else why)
        if status in STOPPED_EARLY:
            return None, stopped_text(self.runs[run])
        if is_timed(spec) and readable(status, spec) and shared_from_step(self.runs[run]) is not None:
            return None, SHARED_GPU
        return None, {"ok": "n/a", "oom": "OOM", "not run": "not run"}.get(status, status)


SHARED_GPU = "GPU shared"   # a time measured while other runs trained on the same GPU
TIME_UNITS = {"µs", "ms", "s", "min", "h"}


def is_timed(spec: dict[str, Any]) -> bool:
    """Whether a recipe metric is a time or a rate (its unit a time or per second, MFU, seconds to
    a level), which a run that shared its GPU did not measure for itself. `timed:` overrides."""
    if "timed" in spec:
        return bool(spec["timed"])
    if "reach" in spec:
        return str(spec["reach"].get("x", "step")).startswith("time/")
    unit = str(spec.get("unit") or "")
    return unit in TIME_UNITS or "/s" in unit or "mfu" in spec.get("keys", [])


def readable(status: str | None, spec: dict[str, Any]) -> bool:
    """Whether a run with `status` gives metric `spec`: finished runs do; paused, diverged and
    stalled ones only for metrics marked `so_far` (measured while training)."""
    return status == "ok" or status in ("paused", *STOPPED_EARLY) and bool(spec.get("so_far"))


def first_number(data: Any, keys: Iterable[str]) -> float | None:
    for key in keys:
        v = lookup(data, key)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def fmt_value(value: Any, fmt: str | None = None) -> str:
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    if fmt:
        return format(int(round(value)) if fmt.endswith("d") else value, fmt)
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{value:g}" if abs(value) < 1e6 else f"{value:.3g}"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


# ------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------
def _cells(spec: Any, columns: list[str]) -> dict[str, dict[str, Any]]:
    """Normalise a report row (a run name, or column -> run / {run, where}) to column -> cell.
    A cell's run may be a list of runs (seeds): the cell is their mean (`cell_value`)."""
    if isinstance(spec, str):
        return {c: {"run": spec} for c in columns}
    return {c: (v if isinstance(v, dict) else {"run": v}) for c, v in (spec or {}).items()}


def cell_runs(cell: dict[str, Any]) -> list[str]:
    return cell["run"] if isinstance(cell["run"], list) else [cell["run"]]


def cell_value(ours: Ours, cell: dict[str, Any], metric: str) -> tuple[float | None, str]:
    """(value, text) of a table cell: its run's metric (text: why it is missing), or for a list
    of runs (seeds) the mean of those that have the value, with text "k of n seeds" while
    some have none (without any: each run's text, once where they agree)."""
    found = [ours.cell(run, metric, cell.get("where")) for run in cell_runs(cell)]
    have = [v for v, _ in found if v is not None]
    if not have:
        texts = [text for _, text in found]
        return None, texts[0] if len(set(texts)) == 1 else " / ".join(texts)
    return sum(have) / len(have), ("" if len(have) == len(found)
                                    else f"{len(have)} of {len(found)} seeds")


def fmt_cell(value: float | None, text: str, fmt: str | None) -> str:
    """A cell as shown: the value (with its note, e.g. "1 of 2 seeds"), else why it is missing."""
    if value is None:
        return text or MISSING
    return fmt_value(value, fmt) + (f" ({text})" if text else "")


def our_row(ours: Ours, table: dict[str, Any], row: str, columns: list[str],
            rows_cache: dict[str, dict[str, tuple[Any, str]]]) -> dict[str, tuple[Any, str]]:
    """Our values of one row: column -> (value, text when missing)."""
    if row in rows_cache:
        return rows_cache[row]
    col_specs = table.get("columns") or {}
    cells = _cells((table.get("rows") or {}).get(row), columns)
    for extra, source in (table.get("extra_cells") or {}).items():
        if extra not in cells and source in cells:
            cells[extra] = cells[source]
    values: dict[str, tuple[Any, str]] = {}
    for col in columns:                   # direct metrics first, derived columns after
        spec = col_specs.get(col) or {}
        cell = cells.get(col)
        if spec.get("derive") or not cell or not spec.get("metric"):
            continue
        values[col] = cell_value(ours, cell, spec["metric"])
    for col in columns:
        spec = col_specs.get(col) or {}
        if spec.get("derive") == "mean":
            parts = [values.get(c, (None, ""))[0] for c in spec["of"]]
            values[col] = ((sum(parts) / len(parts), "") if parts and None not in parts
                           else (None, "incomplete"))
        elif spec.get("derive") == "ratio":
            values[col] = _ratio(ours, table, row, col, spec, cells, columns)
        elif spec.get("derive") == "record_ratio":
            values[col] = record_ratio(ours, spec)
        elif spec.get("derive") == "curve_gap":
            values[col] = _curve_gap(ours, table, row, col, spec, cells, columns)
        elif spec.get("derive") == "reach_ratio":
            values[col] = _reach_ratio(ours, table, row, col, spec, cells, columns)
    for col in columns:
        values.setdefault(col, (None, MISSING))
    rows_cache[row] = values
    return values


def _ratio(ours, table, row, col, spec, cells, columns):
    """Our speedup: metric(row) / metric(baseline row), inverted for times (lower is better).

    The baseline row is `baseline_rows[row]`, else `baseline_row`. With one run per column (LRA:
    one per task) it is the mean over the columns in `of` where both runs have the metric."""
    baseline = (spec.get("baseline_rows") or {}).get(row, spec["baseline_row"])
    base_cells = _cells((table.get("rows") or {}).get(baseline), columns)
    ratios, other_gpu, why = [], False, "n/a"
    for c in spec.get("of") or [col]:
        mine, base = cells.get(c), base_cells.get(c)
        if not mine or not base:
            continue
        if len(_cell_devices(ours, mine) | _cell_devices(ours, base)) > 1:
            other_gpu = True          # a ratio of two GPUs' speeds measures the GPUs
            continue
        a, a_why = cell_value(ours, mine, spec["metric"])
        b = cell_value(ours, base, spec["metric"])[0]
        if a and b:
            ratios.append(b / a if spec.get("lower_is_better") else a / b)
        elif a is None and all(ours.status(run) == "ok" for run in cell_runs(mine)):
            why = a_why               # a finished run without the value says why (not reached)
    if not ratios:
        return None, "baseline on another GPU" if other_gpu else why
    return sum(ratios) / len(ratios), ""


def _cell_devices(ours: Ours, cell: dict[str, Any]) -> set[str]:
    return {d for d in map(ours.device, cell_runs(cell)) if d}


def _curve_pair(ours, table, row, col, spec, cells, columns, x_default):
    """The `curve` of the row's run and of its baseline row's ({x: value} each; `x` or
    x_default), and what the cell says: "paused" when one of them is; or (None, why) when one has
    no curve, or when the two read different token caches (another corpus or tokenizer). The
    baseline row is `baseline_rows[row]`, else `baseline_row`."""
    mine = cells.get(col)
    baseline = (spec.get("baseline_rows") or {}).get(row, spec["baseline_row"])
    base = _cells((table.get("rows") or {}).get(baseline), columns).get(col)
    if not mine or not base:
        return None, "n/a"
    caches = {lookup((ours.runs.get(c["run"]) or {}).get("metrics") or {}, "token_cache") for c in (mine, base)}
    if None not in caches and len(caches) > 1:
        return None, "other data"
    x_key = spec.get("x", x_default)
    a, b = ours.curve(mine["run"], spec["curve"], x_key), ours.curve(base["run"], spec["curve"], x_key)
    statuses = [ours.status(c["run"]) for c in (mine, base)]
    if not a or not b:
        return None, next((s for s in statuses if s != "ok"), "no curve")
    return (a, b), "paused" if "paused" in statuses else ""


def _curve_gap(ours, table, row, col, spec, cells, columns):
    """The largest |curve(row) - curve(baseline row)| over the x values (steps by default) that
    both runs logged: how far apart two runs of the same data order ever were, e.g. in training
    loss; with `at: end`, curve(row) - curve(baseline row) at the last x both logged; `scale`
    multiplies the difference (100: accuracy in points). A paused run counts up to its pause, and
    the cell says so."""
    pair, why = _curve_pair(ours, table, row, col, spec, cells, columns, "step")
    if pair is None:
        return None, why
    (a, b), scale = pair, float(spec.get("scale", 1.0))
    common = a.keys() & b.keys()
    if not common:
        return None, "no common points"
    if spec.get("at") == "end":
        return scale * (a[max(common)] - b[max(common)]), why
    return scale * max(abs(a[x] - b[x]) for x in common), why


def _reach_ratio(ours, table, row, col, spec, cells, columns):
    """Time to accuracy without choosing a level: for each value the baseline row's `curve` logged
    that both runs reached, the baseline's first `x` (training time) at or above it over the row's;
    the median of these ratios, noted with their range, their count and the highest level (times
    `scale`). A paused run counts up to its pause."""
    pair, why = _curve_pair(ours, table, row, col, spec, cells, columns, "time/train_s")
    if pair is None:
        return None, why
    a, b = pair

    def first(curve, level):
        return min(x for x, y in curve.items() if y >= level)

    levels = [y for y in set(b.values()) if y <= min(max(a.values()), max(b.values()))]
    if not levels:
        return None, "no level both reached"
    ratios = sorted(first(b, level) / first(a, level) for level in levels)
    return statistics.median(ratios), (f"{ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} levels "
                                       f"up to {float(spec.get('scale', 1.0)) * max(levels):.1f}"
                                       + (f", {why}" if why else ""))


def record_ratio(ours: Ours, spec: dict[str, Any]) -> tuple[float | None, str]:
    """Ratio of a metric between two sets of bench records of one run, joined on `join` fields
    (e.g. runtime of impl=standard over impl=flash at equal seqlen), aggregated by `agg`."""
    mspec = ours.recipe.metrics[spec["metric"]]
    base_where = mspec.get("where") or {}

    def table(side: dict[str, Any]) -> dict[tuple, float]:
        out = {}
        for rec in ours.records(spec["run"]):
            if not matches(rec, {**base_where, **side}) or not in_range(rec, spec.get("range")):
                continue
            v = first_number(rec, mspec["keys"])
            if v:
                out[tuple(lookup(rec, k) for k in spec.get("join") or [])] = v
        return out

    num, den = table(spec["num"]), table(spec["den"])
    ratios = [num[k] / den[k] for k in num if k in den]
    if not ratios:
        status = ours.status(spec["run"])
        return None, "n/a" if status == "ok" else {"oom": "OOM"}.get(status, status)
    agg = spec.get("agg", "max")
    return {"max": max, "min": min}.get(agg, lambda r: sum(r) / len(r))(ratios), ""


def in_range(record: dict[str, Any], ranges: dict[str, list] | None) -> bool:
    """Every `field: [low, high]` of `ranges` holds (inclusive) for the record."""
    for key, (low, high) in (ranges or {}).items():
        v = first_number(record, [key])
        if v is None or v < low or v > high:
            return False
    return True


def table_columns(recipe: Recipe, table: dict[str, Any]) -> list[str]:
    """A report table's columns: its paper table's, then its own (extra_columns)."""
    ptable = recipe.paper["tables"][table["paper_table"]]
    return list(ptable["columns"]) + list(table.get("extra_columns") or [])


def render_table(ours: Ours, table: dict[str, Any], scale: str) -> list[str]:
    recipe = ours.recipe
    ptable = recipe.paper["tables"][table["paper_table"]]
    columns = list(ptable["columns"])
    extra = list(table.get("extra_columns") or [])
    col_specs = table.get("columns") or {}
    units = ptable.get("units") or {}

    def header(col: str) -> str:
        spec = col_specs.get(col) or {}
        unit = units.get(col) or (recipe.metrics.get(spec.get("metric"), {}).get("unit")
                                  if col in extra and not spec.get("derive") else None)
        return f"{col} ({unit})" if unit and unit.lower() not in col.lower() else col

    show_paper = table.get("show_paper", True)
    caption = (f"**{ptable.get('caption', table['paper_table'])}** — unit: {ptable['unit']}"
               if show_paper else f"**{table.get('title', '')}** — ours only")
    lines = [caption, "",
             "| " + " | ".join(["row", "source"] + [header(c) for c in columns + extra]) + " |",
             "|" + "---|" * (2 + len(columns) + len(extra))]
    cache: dict[str, dict[str, tuple[Any, str]]] = {}
    paper_rows = ptable["rows"]
    our_rows = table.get("rows") or {}
    row_devices = {row: set().union(*[_cell_devices(ours, c) for c in
                                      _cells(spec, columns + extra).values()])
                   for row, spec in our_rows.items()}
    several = len(set().union(*row_devices.values())) > 1   # then each row names its GPU
    for row in row_order(list(paper_rows) if show_paper else [], list(our_rows)):
        if row in paper_rows and show_paper:
            vals = [MISSING if v is None else str(v) for v in paper_rows[row]] + [MISSING] * len(extra)
            lines.append("| " + " | ".join([row, "paper"] + vals) + " |")
        if row in our_rows:
            got = our_row(ours, table, row, columns + extra, cache)
            cells = []
            for c in columns + extra:
                cells.append(fmt_cell(*got[c], (col_specs.get(c) or {}).get("fmt")
                                      or _metric_fmt(recipe, col_specs.get(c))))
            gpu = f", {' + '.join(sorted(row_devices[row]))}" if several and row_devices[row] else ""
            lines.append("| " + " | ".join([row, f"ours ({scale}{gpu})"] + cells) + " |")
    notes = [n for n in [ptable.get("note"), table.get("note")] if n]
    lines += [""] + [f"_{n.strip()}_" for n in notes]
    return lines


def row_order(paper_rows: list[str], our_rows: list[str]) -> list[str]:
    """Paper rows in the paper's order; each row of ours only right after the row it follows
    in the report's `rows` mapping (or first when it leads it)."""
    order = list(paper_rows)
    for i, row in enumerate(our_rows):
        if row in order:
            continue
        prev = our_rows[i - 1] if i else None
        order.insert(order.index(prev) + 1 if prev in order else len(order) if i else 0, row)
    return order


def _metric_fmt(recipe: Recipe, spec: dict | None) -> str | None:
    if not spec:
        return None
    if spec.get("derive") == "ratio":
        return ".2f"
    if spec.get("derive") == "curve_gap":
        return ".3f"
    return recipe.metrics.get(spec.get("metric"), {}).get("fmt")


def _metric_label(recipe: Recipe, metric: str) -> str:
    spec = recipe.metrics.get(metric, {})
    return f"{spec.get('label', metric)}" + (f" ({spec['unit']})" if spec.get("unit") else "")


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------
def _steps_line(ours: Ours) -> str | None:
    steps = {}
    for run, entry in ours.runs.items():
        if entry.get("kind") == "train" and entry.get("status") == "ok":
            s = first_number(entry.get("metrics") or {},
                             ["global_step", "trainer/global_step", "step", "steps"])
            if s is None:
                s = (entry.get("overrides") or {}).get("trainer.max_steps")
            if s is not None:
                steps[run] = int(s)
    if not steps:
        return None
    lo, hi = min(steps.values()), max(steps.values())
    return f"optimizer steps run: {lo}" + (f"–{hi}" if hi != lo else "") + " per training run"


def _devices(ours: Ours) -> list[str]:
    return sorted({d for d in map(ours.device, ours.runs) if d})


def paused_section(ours: Ours) -> list[str]:
    """Lines describing the paused runs: how far each got and its last validation metrics
    (their tables show "paused": a paused run has no final or test numbers)."""
    paused = [(n, e) for n, e in ours.runs.items() if e.get("status") == "paused"]
    if not paused:
        return []
    lines = ["## Runs in progress (paused)", "",
             "Paused by `fa-repro run --pause-after`; the same command continues each run whose "
             "checkpoint is kept and starts the others again from step 0. Values at the pause, "
             "not results. \"Left\": the steps still to run (all of them when the checkpoint "
             "is not kept) at the seconds per step the run measured while it had its GPU alone "
             "(validation excluded).", "",
             "| run | step | of | epoch | last validation | stretches | checkpoint | left (min) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, e in paused:
        m = e.get("metrics") or {}
        run_dir = ours.out_dir / e.get("run_dir", name)
        total = planned_steps(run_dir)
        val = ", ".join(f"{k} {fmt_value(v)}" for k, v in sorted(m.items())
                        if k.startswith("val/") and isinstance(v, (int, float)))
        kept = (run_dir / "checkpoints" / "last.ckpt").is_file()
        rate = seconds_per_step(run_dir / "metrics.csv", shared_from_step(e))
        step = m.get("global_step") if kept else 0   # without its checkpoint it starts again
        left = (fmt_value((total - step) * rate / 60, ".1f") if rate and total
                and isinstance(step, int) else MISSING)
        lines.append(f"| {name} | {m.get('global_step', MISSING)} | {total or MISSING} | "
                     f"{m.get('epoch', MISSING)} | {val or MISSING} | {e.get('stretches', 1)} | "
                     f"{'kept' if kept else 'not kept'} | {left} |")
    return lines + [""]


def render_report(recipe: Recipe, scale: str, out_dir: Path | str | None = None) -> Path:
    """Write <out>/report.md and its PNGs; return the report's path."""
    from fa_train.repro.plots import PLOTTERS   # the plots build on this module's Ours
    out = Path(out_dir) if out_dir else default_out_dir(recipe, scale)
    out.mkdir(parents=True, exist_ok=True)
    ours = Ours(recipe, out)
    sc = recipe.scale(scale)
    paper = recipe.paper
    host = ours.data.get("host") or {}
    counts: dict[str, int] = {}
    for entry in ours.runs.values():
        counts[entry.get("status", "?")] = counts.get(entry.get("status", "?"), 0) + 1
    n_runs = len(recipe.scale_run_names(scale))
    other, borrowed = recipe.borrowed(scale)
    lines = [f"# {recipe.title}", "",
             f"Recipe `{recipe.path.name}`, scale **{scale}**. Rendered by `fa-repro report` from "
             f"`{RESULTS_FILE}`; every number labelled *ours* comes from a result file, every "
             f"number labelled *paper* from the recipe's `paper:` block.", "",
             "## Hardware and scale", "",
             f"- **Paper**: {paper['hardware']} — source: {paper['source']}.",
             f"- **Ours**: scale `{scale}` — {sc['hardware']}."]
    devices = _devices(ours)
    lines.append(f"- Devices reported by the runs: {', '.join(devices) if devices else 'none recorded'}"
                 f"; host GPUs: {', '.join(host.get('gpus') or ['unknown'])}"
                 f" (host `{host.get('hostname', '?')}`).")
    first = min((str(e["started"]) for e in ours.runs.values() if e.get("started")), default="?")
    last = max((str(e["finished"]) for e in ours.runs.values() if e.get("finished")), default="?")
    lines.append(f"- Runs made {first} to {last} "
                 f"(UTC); runs: {n_runs} at this scale"
                 + (f" and {len(borrowed)} of the same settings reported from the {other} scale's"
                    f" folder ({len(ours.borrowed)} recorded there)" if borrowed else "")
                 + ", statuses "
                 f"{', '.join(f'{v} {k}' for k, v in sorted(counts.items())) or 'none yet'}.")
    steps = _steps_line(ours)
    if steps:
        lines.append(f"- {steps}; the paper's settings: {sc.get('paper_settings') or recipe.scale('full').get('paper_settings') or 'see the full scale'}.")
    lines += ["", f"**What this scale measures.** {sc['measures'].strip()}", ""]
    if scale != "full":
        lines += ["> Numbers at this scale are not comparable in absolute terms to the paper's: "
                  "fewer steps, smaller data, different GPU. Compare trends and ratios, not values.",
                  ""]
    for table in recipe.report.get("tables") or []:
        lines += ["## " + table.get("title", recipe.paper["tables"][table["paper_table"]]
                                     .get("caption", table["paper_table"])), ""]
        lines += render_table(ours, table, scale) + [""]
    if recipe.report.get("claims"):
        from fa_train.repro.claims import render_claims   # it builds on this module's readers
        lines += render_claims(ours, scale)
    plots = recipe.report.get("plots") or []
    if plots:
        lines += ["## Plots", ""]
        for i, plot in enumerate(plots):
            fname = plot.get("file", f"{plot['type']}_{i}.png")
            made = PLOTTERS[plot["type"]](ours, plot, out / fname)
            title = plot.get("title", fname)
            lines += ([f"![{title}]({fname})", ""] if made
                      else [f"_{title}: no data yet (no finished run has the values)._", ""])
    lines += paused_section(ours)
    problems = [(n, e) for n, e in ours.runs.items() if e.get("status") not in ("ok", "paused")]
    if problems:
        lines += ["## Runs that did not finish", "", "| run | status | error |", "|---|---|---|"]
        for name, e in problems:
            err = str(e.get("error") or "").replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {name} | {e.get('status')} | {err} |")
        lines.append("")
    lines += ["## Runs", "", "| run | kind | status | duration (s) | finished |", "|---|---|---|---|---|"]
    for name in recipe.scale_run_names(scale) + borrowed:
        e = ours.runs.get(name) or {}
        shown = f"{name} ({other} scale)" if name in borrowed else name
        lines.append(f"| {shown} | {e.get('kind', '')} | {e.get('status', 'not run')} | "
                     f"{e.get('duration_s', '')} | {e.get('finished', '')} |")
    lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
