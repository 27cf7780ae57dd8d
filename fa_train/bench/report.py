"""Result files of a benchmark: NAME.json (environment, config, rows), NAME.md (tables), PNG plots.

Every number in the Markdown and the plots is read from the rows, which are what the JSON holds.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Table:
    """A pivot table: one line per distinct `index` tuple, one column per distinct `column` value.

    Cells hold `value` formatted with `fmt`, or the row's status when it is not "ok".
    """
    title: str
    index: tuple
    column: str
    value: str
    fmt: str = ".1f"
    where: dict = field(default_factory=dict)


@dataclass
class Plot:
    """Line plot(s): y against x, one line per `series` tuple, one panel per `panels` tuple."""
    filename: str
    x: str
    y: str
    series: tuple
    panels: tuple = ()
    where: dict = field(default_factory=dict)
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    logx: bool = True
    logy: bool = True


def _matches(row, where):
    for key, want in where.items():
        if isinstance(want, (list, tuple, set)):
            if row.get(key) not in want:
                return False
        elif row.get(key) != want:
            return False
    return True


def _fmt(value, fmt):
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return format(value, fmt)
    return str(value)


def cell(row, value, fmt):
    status = row.get("status", "ok")
    if status != "ok":
        return status
    return _fmt(row.get(value), fmt)


def pivot_markdown(rows, table):
    """Markdown text of one pivot table (empty string when no row matches)."""
    rows = [r for r in rows if _matches(r, table.where)]
    if not rows:
        return ""
    columns = list(dict.fromkeys(r.get(table.column) for r in rows))
    lines = {}
    for r in rows:
        key = tuple(r.get(k) for k in table.index)
        lines.setdefault(key, {})[r.get(table.column)] = cell(r, table.value, table.fmt)
    header = list(table.index) + [str(c) for c in columns]
    out = [f"### {table.title}", "", "| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
    for key, cells in lines.items():
        values = [_fmt(k, "g") for k in key] + [cells.get(c, "") for c in columns]
        out.append("| " + " | ".join(values) + " |")
    return "\n".join(out) + "\n"


def write_plot(rows, plot, out_dir):
    """Write one PNG (matplotlib, Agg canvas); returns its path, or None with no data to draw."""
    rows = [r for r in rows if _matches(r, plot.where) and r.get("status", "ok") == "ok"
            and r.get(plot.y) is not None and r.get(plot.x) is not None]
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = list(dict.fromkeys(tuple(r.get(k) for k in plot.panels) for r in rows))
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5.2 * ncols, 4.0 * nrows))
    FigureCanvasAgg(fig)
    for n, panel in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, n + 1)
        in_panel = [r for r in rows if tuple(r.get(k) for k in plot.panels) == panel]
        for series in dict.fromkeys(tuple(r.get(k) for k in plot.series) for r in in_panel):
            pts = sorted((r[plot.x], r[plot.y]) for r in in_panel
                         if tuple(r.get(k) for k in plot.series) == series)
            label = ", ".join(f"{k}={v}" if len(plot.series) > 1 else str(v)
                              for k, v in zip(plot.series, series))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        if plot.logx:
            ax.set_xscale("log", base=2)
        if plot.logy:
            ax.set_yscale("log")
        ax.set_xlabel(plot.xlabel or plot.x)
        ax.set_ylabel(plot.ylabel or plot.y)
        ax.set_title(", ".join(f"{k}={v}" for k, v in zip(plot.panels, panel)) or plot.title,
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if plot.title:
        fig.suptitle(plot.title)
    fig.tight_layout()
    path = Path(out_dir) / plot.filename
    fig.savefig(path, dpi=110)
    return path


def _failure_notes(rows):
    seen = {}
    for r in rows:
        if r.get("status", "ok") != "ok" and r.get("reason"):
            seen.setdefault((r.get("impl"), r["status"], r["reason"]), 0)
            seen[(r.get("impl"), r["status"], r["reason"])] += 1
    return [f"- {impl} {status} ({count} rows): {reason}"
            for (impl, status, reason), count in seen.items()]


def write_reports(rows, out_dir, name, environment=None, config=None, tables=(), plots=(),
                  notes=()):
    """Write OUT_DIR/NAME.json, OUT_DIR/NAME.md and the plots; returns {kind: path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    payload = {"bench": name, "environment": environment or {}, "config": config or {},
               "rows": list(rows)}
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    paths["json"] = json_path

    pngs = []
    for plot in plots:
        path = write_plot(rows, plot, out_dir)
        if path is not None:
            pngs.append(path)
            paths[plot.filename] = path

    env = environment or {}
    md = [f"# fa-bench {name}", ""]
    where = env.get("gpu") or env.get("device", "?")
    md.append(f"Measured on {where}, {env.get('date', '?')}; torch {env.get('torch', '?')}, "
              f"triton {env.get('triton', '?')}, commit {env.get('git_commit', '?')}. "
              f"Rows: `{json_path.name}`.")
    md.append("")
    md.extend(notes)
    if notes:
        md.append("")
    for table in tables:
        text = pivot_markdown(rows, table)
        if text:
            md.append(text)
    for png in pngs:
        md.append(f"![{png.stem}]({png.name})")
        md.append("")
    failures = _failure_notes(rows)
    if failures:
        md.append("### Not measured")
        md.append("")
        md.extend(failures)
        md.append("")
    md_path = out_dir / f"{name}.md"
    md_path.write_text("\n".join(md))
    paths["md"] = md_path
    return paths


def load_rows(path):
    """Rows of a NAME.json written by write_reports."""
    return json.loads(Path(path).read_text())["rows"]
