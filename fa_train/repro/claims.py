"""The paper's claims in words beside what our result files show: a report's claims table.

Recipe ``report.claims``: one table row per sentence of ``paper.claims`` (keyed by its number,
from 1); a claim without a row is shown as not compared::

    claims:
      title: "Figure 3 — the paper's claims and what we measured"
      note: "..."
      rows:
        1:
          ours: {table: figure3, row: FlashAttention, column: "max speedup, N 128-2K"}
          expect: {at_least: 3}
        5:
          ours: {derive: crossover, metric: runtime_ms, x: seqlen, per: batch,
                 subject: {run: dense, where: {impl: flash}},
                 rivals: [{run: approximate, label: impl}]}
          expect: {between: [512, 1024]}

``ours`` is a cell of a report table (``table``: its paper_table, ``row``, ``column``), or with
``rows`` (a list of rows) that column's cells in order, whose value is whether they increase
strictly down the list (``expect: {equals: true}``; list the rows the other way for "decrease"),
or a derive kind over bench records. Record sets are sides ``{run, where, label}``: the run, a
filter, and the record field that names a record in the text (a ``key=value,...`` description is
shortened to its own key's value: ``layout=bigbird,...`` -> ``bigbird``). ``metric`` (a recipe
metric: its keys, ``where`` and scale) gives each record's value; ``per: <field>`` divides it by a
record field (``batch``: time per sequence, for runs with different batch sizes); ``x`` is the
sweep field.

- ``crossover``: the smallest x at which some rival is faster (lower) than the subject, with those
  rivals, fastest first. Value: that x (none when they never are).
- ``fastest``: at each x of the subject, the subject against the fastest rival there, as
  rival / subject. ``pick: {max: density}`` chooses the subject record at each x (default: its
  fastest); ``spread: [ms_p20, ms_p80]`` marks the x where the two records' spreads overlap.
  Value: whether the subject is faster (by the metric) at every x.
- ``oom``: the sides' labels with an out-of-memory record (status OOM), each at its first x, and
  those with a value at x = ``at``. Value: the labels that ran at ``at``.

``expect`` turns the value into the verdict (holds / does not hold): ``at_least``, ``at_most``,
``between: [low, high]`` (inclusive) or ``equals`` (lists compare as sets). A row without it, or
whose runs did not all finish (a table cell's runs: its rows' and their baseline rows'), has no
verdict; a run that has not run reads "not run yet".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fa_train.repro.report import (MISSING, Ours, _cells, _metric_fmt, cell_runs, first_number,
                                   fmt_value, lookup, matches, our_row, table_columns)
from fa_train.repro.recipe import Recipe

NOT_RUN = "not run yet"


@dataclass
class Finding:
    """What a claim row shows (`text`), the value `expect` tests, and whether it was measured."""
    text: str
    value: Any = None
    measured: bool = True


@dataclass
class Point:
    """One bench record's value at one x, the label naming it, and its timing spread."""
    value: float
    label: str
    record: dict[str, Any]
    spread: tuple[float, float] | None = None


# ------------------------------------------------------------------------------------------------
# Reading the sides
# ------------------------------------------------------------------------------------------------
def record_label(record: dict[str, Any], field: str | None, default: str) -> str:
    """The record's `field` as text; a ``key=value,...`` description gives its `field` key."""
    if not field:
        return default
    value = lookup(record, field)
    text = str(value)
    if isinstance(value, str) and "=" in value:
        parts = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
        text = parts.get(field, text)
    return text


def side_points(ours: Ours, spec: dict[str, Any], side: dict[str, Any]
                ) -> dict[float, list[Point]]:
    """{x: points} of one side: its run's records that match the metric's and the side's `where`
    and have a value (divided by the `per` field when given)."""
    mspec = ours.recipe.metrics[spec["metric"]]
    where = {**(mspec.get("where") or {}), **(side.get("where") or {})}
    out: dict[float, list[Point]] = {}
    for rec in ours.records(side["run"]):
        if not matches(rec, where):
            continue
        x, value = first_number(rec, [spec["x"]]), first_number(rec, mspec["keys"])
        per = first_number(rec, [spec["per"]]) if spec.get("per") else 1.0
        if x is None or value is None or not per:
            continue
        factor = float(mspec.get("scale", 1.0)) / per
        label = record_label(rec, side.get("label"), side["run"])
        bounds = [first_number(rec, [k]) for k in spec.get("spread") or []]
        has_spread = len(bounds) == 2 and None not in bounds
        spread = (bounds[0] * factor, bounds[1] * factor) if has_spread else None
        out.setdefault(x, []).append(Point(value * factor, label, rec, spread))
    return out


def merged(ours: Ours, spec: dict[str, Any], sides: list[dict[str, Any]]
           ) -> dict[float, list[Point]]:
    """{x: points} of several sides together."""
    out: dict[float, list[Point]] = {}
    for side in sides:
        for x, points in side_points(ours, spec, side).items():
            out.setdefault(x, []).extend(points)
    return out


def subject_points(ours: Ours, spec: dict[str, Any]) -> dict[float, Point]:
    """The subject's record at each x: the one with the largest `pick.max` field, else the
    fastest."""
    field = (spec.get("pick") or {}).get("max")
    key = (lambda p: first_number(p.record, [field]) or 0.0) if field else (lambda p: -p.value)
    points = side_points(ours, spec, spec["subject"])
    return {x: max(at_x, key=key) for x, at_x in points.items()}


def unfinished(ours: Ours, runs: list[str]) -> Finding | None:
    """A not-measured finding naming the first run that has no results ("not run yet" when none
    has run), else None."""
    if runs and all(ours.status(run) == "not run" for run in runs):
        return Finding(NOT_RUN, measured=False)
    for run in runs:
        status = ours.status(run)
        if status != "ok":
            return Finding(f"{run}: {NOT_RUN if status == 'not run' else status}", measured=False)
    return None


def claim_runs(spec: dict[str, Any]) -> list[str]:
    """The runs a derive spec reads, in order."""
    sides = [spec["subject"]] if spec.get("subject") else []
    sides += list(spec.get("rivals") or []) + list(spec.get("sides") or [])
    return list(dict.fromkeys(side["run"] for side in sides))


def _x(x: float) -> str:
    return fmt_value(int(x) if float(x).is_integer() else x)


# ------------------------------------------------------------------------------------------------
# Derive kinds
# ------------------------------------------------------------------------------------------------
def crossover(ours: Ours, spec: dict[str, Any]) -> Finding:
    """The smallest x where some rival beats the subject, and which rivals (fastest first)."""
    subject, rivals = subject_points(ours, spec), merged(ours, spec, spec["rivals"])
    for x in sorted(subject):
        faster = sorted((p for p in rivals.get(x, []) if p.value < subject[x].value),
                        key=lambda p: p.value)
        if faster:
            names = list(dict.fromkeys(p.label for p in faster))
            return Finding(f"{_x(x)} ({', '.join(names)})", x)
    compared = [x for x in subject if x in rivals]
    text = f"none up to {_x(max(compared))}" if compared else f"no common {spec['x']}"
    return Finding(text, None, measured=bool(compared))


def fastest(ours: Ours, spec: dict[str, Any]) -> Finding:
    """The subject against the fastest rival at each of its x: rival / subject, and the verdict
    value whether the subject is faster at every x."""
    subject, rivals = subject_points(ours, spec), merged(ours, spec, spec["rivals"])
    parts, slower = [], []
    for x in sorted(subject):
        if not rivals.get(x):
            continue
        best = min(rivals[x], key=lambda p: p.value)
        overlap = best.spread and subject[x].spread and \
            best.spread[0] <= subject[x].spread[1] and subject[x].spread[0] <= best.spread[1]
        parts.append(f"{_x(x)} {best.value / subject[x].value:.2f}× ({best.label}"
                     + (", spreads overlap)" if overlap else ")"))
        if subject[x].value >= best.value:
            slower.append(_x(x))
    if not parts:
        return Finding(f"no common {spec['x']}", measured=False)
    labels = list(dict.fromkeys(p.label for p in subject.values()))
    field = (spec.get("pick") or {}).get("max")
    who = ", ".join(labels) + (f" (largest {field})" if field else "")
    summary = f"slower at {', '.join(slower)}" if slower else f"faster at every {spec['x']}"
    return Finding(f"{who}: {summary}; the fastest other's time over it: {', '.join(parts)}",
                   not slower)


def first_oom(ours: Ours, spec: dict[str, Any], side: dict[str, Any]) -> dict[str, float]:
    """{label: first x} of the side's records of metric `spec['metric']` that ran out of memory."""
    mspec = ours.recipe.metrics[spec["metric"]]
    where = {**(mspec.get("where") or {}), **(side.get("where") or {})}
    out: dict[str, float] = {}
    for rec in ours.records(side["run"]):
        x = first_number(rec, [spec["x"]])
        if x is not None and matches(rec, where) and str(rec.get("status")).lower() == "oom":
            label = record_label(rec, side.get("label"), side["run"])
            out[label] = min(x, out.get(label, x))
    return out


def oom(ours: Ours, spec: dict[str, Any]) -> Finding:
    """Labels with an OOM record, each at its first x, and the labels with a value at `at`."""
    first: dict[str, float] = {}
    for side in spec["sides"]:
        for label, x in first_oom(ours, spec, side).items():
            first[label] = min(x, first.get(label, x))
    at_end = merged(ours, spec, spec["sides"]).get(spec["at"], [])
    ran = list(dict.fromkeys(p.label for p in at_end))
    oom_text = "; ".join(f"{label} from {_x(x)}" for label, x in first.items())
    text = f"OOM: {oom_text or 'none'}; ran at {_x(spec['at'])}: {', '.join(ran) or 'none'}"
    return Finding(text, ran)


def report_table(recipe: Recipe, paper_table: str) -> tuple[dict[str, Any], list[str]]:
    """The report table filling paper table `paper_table`, and its columns (paper's, then ours)."""
    table = next(t for t in recipe.report["tables"] if t["paper_table"] == paper_table)
    return table, table_columns(recipe, table)


def cell_run_names(table: dict, rows: list[str], column: str, columns: list[str]) -> list[str]:
    """The runs behind the cells of `rows` in `column` (none for derived columns of rows given
    column by column)."""
    names = []
    for row in rows:
        cell = _cells((table.get("rows") or {}).get(row), columns).get(column)
        names += cell_runs(cell) if cell else []
    return names


def table_runs(ours: Ours, spec: dict[str, Any]) -> list[str]:
    """The runs a table claim reads: its rows' cells and, for a ratio or a curve gap, the cells of
    each row's baseline row."""
    table, columns = report_table(ours.recipe, spec["table"])
    rows = spec.get("rows") or [spec["row"]]
    col_spec = (table.get("columns") or {}).get(spec["column"]) or {}
    if "baseline_row" in col_spec:
        rows = rows + [(col_spec.get("baseline_rows") or {}).get(r, col_spec["baseline_row"])
                       for r in rows]
    return list(dict.fromkeys(cell_run_names(table, rows, spec["column"], columns)))


def table_cell(ours: Ours, spec: dict[str, Any]) -> Finding:
    """A cell of one of the report's tables (the one filling paper table `table`); with `rows`,
    that column's cells in order, and whether they increase strictly."""
    recipe = ours.recipe
    table, columns = report_table(recipe, spec["table"])
    col_spec = (table.get("columns") or {}).get(spec["column"]) or {}
    unit = (recipe.paper["tables"][spec["table"]].get("units") or {}).get(spec["column"], "")
    cache: dict[str, dict[str, tuple[Any, str]]] = {}
    cells = []
    for row in spec.get("rows") or [spec["row"]]:
        value, why = our_row(ours, table, row, columns, cache)[spec["column"]]
        if value is None:
            named = f"{row}: " if "rows" in spec else ""
            return Finding(named + (why or MISSING), measured=False)
        text = fmt_value(value, col_spec.get("fmt") or _metric_fmt(recipe, col_spec))
        text += unit if unit in ("", "×", "%") else f" {unit}"
        cells.append((value, text + (f" ({why})" if why else "")))
    if "rows" not in spec:
        return Finding(cells[0][1], cells[0][0])
    rising = [a[0] < b[0] for a, b in zip(cells, cells[1:])]
    text = f"{spec['rows'][0]}: {cells[0][1]}"
    for up, row, (_, shown) in zip(rising, spec["rows"][1:], cells[1:]):
        text += f" {'<' if up else '≥'} {row}: {shown}"
    return Finding(text, all(rising))


DERIVES = {"crossover": crossover, "fastest": fastest, "oom": oom}


def finding(ours: Ours, spec: dict[str, Any]) -> Finding:
    """A claim row's `ours`: a table cell or a derive kind, once all the runs it reads finished;
    a table cell whose metric is measured while training (`so_far`) also from paused runs."""
    if "table" in spec:
        runs = table_runs(ours, spec)
        if _so_far(ours.recipe, spec):
            runs = [run for run in runs if ours.status(run) != "paused"]
        return unfinished(ours, runs) or table_cell(ours, spec)
    return unfinished(ours, claim_runs(spec)) or DERIVES[spec["derive"]](ours, spec)


def _so_far(recipe: Recipe, spec: dict[str, Any]) -> bool:
    """Whether the metric a table claim's column reads (directly or through a derive) is marked
    `so_far`."""
    table, _ = report_table(recipe, spec["table"])
    col_spec = (table.get("columns") or {}).get(spec["column"]) or {}
    return bool((recipe.metrics.get(col_spec.get("metric")) or {}).get("so_far"))


def verdict(found: Finding, expect: dict[str, Any] | None) -> str:
    """holds / does not hold, from the finding's value and the row's `expect`; MISSING without."""
    if not expect or not found.measured:
        return MISSING
    v = found.value
    (kind, want), = expect.items()
    if kind == "equals":
        ok = set(v or []) == set(want) if isinstance(want, list) else v == want
    else:
        low, high = (want if kind == "between" else
                     (want, None) if kind == "at_least" else (None, want))
        ok = (isinstance(v, (int, float)) and (low is None or v >= low)
              and (high is None or v <= high))
    return "holds" if ok else "does not hold"


def judged_claims(ours: Ours) -> list[tuple[str, Finding, str]]:
    """(claim, what we measured, verdict) for each sentence of paper.claims."""
    rows = ours.recipe.report["claims"].get("rows") or {}
    judged = []
    for i, claim in enumerate(ours.recipe.paper.get("claims") or [], start=1):
        row = rows.get(i)
        found = finding(ours, row["ours"]) if row else Finding("not compared", measured=False)
        judged.append((claim, found, verdict(found, (row or {}).get("expect"))))
    return judged


def claims_table(ours: Ours, scale: str) -> list[str]:
    """The claims table, one row per sentence of paper.claims, and its note."""
    spec = ours.recipe.report["claims"]
    lines = [f"| # | the paper ({ours.recipe.paper['hardware']}) | ours ({scale}) | verdict |",
             "|---|---|---|---|"]
    for i, (claim, found, said) in enumerate(judged_claims(ours), start=1):
        cells = [str(i), claim, found.text, said]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines + ([""] + [f"_{spec['note'].strip()}_"] if spec.get("note") else [])


def render_claims(ours: Ours, scale: str) -> list[str]:
    """The claims section of a report."""
    title = ours.recipe.report["claims"].get("title", "The paper's claims and what we measured")
    return ["## " + title, ""] + claims_table(ours, scale) + [""]
