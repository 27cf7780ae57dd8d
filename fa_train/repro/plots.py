"""The plots of a recipe's report (`report: plots:` in a recipe), drawn from its runs' files:
training curves, one metric against a run label, bench records, loss by position in the window.
`PLOTTERS` maps each plot type to its function (Ours, plot, path) -> the lines drawn."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fa_train.repro.metrics_csv import TRAIN_LOSS_KEYS, read_loss_csv
from fa_train.repro.report import SHARED_GPU, Ours, _metric_label, matches
from fa_train.repro.runner import STOPPED_EARLY, shared_from_step, stopped_text


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_loss(ours: Ours, plot: dict[str, Any], path: Path) -> list[str]:
    plt = _pyplot()
    keys = plot.get("keys") or TRAIN_LOSS_KEYS
    runs = plot.get("runs") or [n for n, e in ours.runs.items() if e.get("kind") == "train"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = []
    for run in runs:
        entry = ours.runs.get(run)
        if not entry or entry.get("status") not in ("ok", "paused", *STOPPED_EARLY):
            continue
        xs, ys = read_loss_csv(ours.out_dir / entry.get("run_dir", run) / "metrics.csv", keys,
                               x_key=plot.get("x", "step"))
        if xs:
            status = entry.get("status")
            label = run + (" (paused: so far)" if status == "paused" else
                           f" ({stopped_text(entry)})" if status in STOPPED_EARLY else "")
            shared = shared_from_step(entry)
            if str(plot.get("x", "")).startswith("time/") and shared is not None:
                label += f" ({SHARED_GPU} from step {shared:,})"
            ax.plot(xs, ys, label=label, marker="." if len(xs) < 30 else None)
            drawn.append(label)
    if not drawn:
        plt.close(fig)
        return drawn
    ax.set_xlabel(plot.get("xlabel", "optimizer step"))
    ax.set_ylabel(plot.get("ylabel", "training loss"))
    ax.set_title(plot.get("title", "training loss"))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def plot_xy(series: dict[str, list[tuple[float, float]]], plot: dict[str, Any], path: Path,
            xlabel: str, ylabel: str, styles: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Draw one line per series (matplotlib keywords per series in `styles`); return the series
    drawn, none when there is nothing to draw. Many series get a legend beside the axes."""
    series = {k: sorted(v) for k, v in series.items() if v}
    if not series:
        return []
    plt = _pyplot()
    many = len(series) > 8
    fig, ax = plt.subplots(figsize=(10.5, 5.5) if many else (7, 4.5))
    colors = plt.get_cmap("tab20").colors
    for i, (name, pts) in enumerate(series.items()):
        style = {"marker": "o", "color": colors[i % len(colors)] if many else None,
                 **(styles or {}).get(name, {})}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=str(name), **style)
    if plot.get("logx"):
        ax.set_xscale("log", base=2)
    if plot.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(plot.get("title", ylabel))
    if many:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return list(series)


def plot_train_xy(ours: Ours, plot: dict[str, Any], path: Path) -> list[str]:
    """One line per `group_label` value: metric `y` against run label `x_label`."""
    series: dict[str, list[tuple[float, float]]] = {}
    for run in ours.recipe.run_names():
        entry = ours.runs.get(run)
        if not entry or entry.get("kind") != "train":
            continue
        labels = entry.get("labels") or {}
        if plot.get("where") and not matches(labels, plot["where"]):
            continue
        x, y = labels.get(plot["x_label"]), ours.metric(run, plot["y"])
        if x is None or y is None:
            continue
        series.setdefault(str(labels.get(plot.get("group_label"), run)), []).append((float(x), y))
    return plot_xy(series, plot, path, plot.get("xlabel", plot["x_label"]),
                   _metric_label(ours.recipe, plot["y"]))


POSITION_KEY = re.compile(r"^(?P<stage>\w+)/loss_pos(?P<lo>\d+)-(?P<hi>\d+)$")


def plot_by_position(ours: Ours, plot: dict[str, Any], path: Path) -> list[str]:
    """One line per run of `runs` (default: all that logged it): its last loss by position in the
    window (`stage`/loss_pos<lo>-<hi>, stage val by default) against the bucket's last position,
    on a log axis."""
    stage = plot.get("stage", "val")
    series: dict[str, list[tuple[float, float]]] = {}
    for run in plot.get("runs") or ours.recipe.run_names():
        entry = ours.runs.get(run) or {}
        if entry.get("status") not in ("ok", "paused"):
            continue
        label = run + (" (paused: so far)" if entry["status"] == "paused" else "")
        for key, value in (entry.get("metrics") or {}).items():
            m = POSITION_KEY.match(key)
            if m and m["stage"] == stage and isinstance(value, (int, float)):
                series.setdefault(label, []).append((float(m["hi"]), float(value)))
    return plot_xy(series, {"logx": True, **plot}, path,
                   plot.get("xlabel", "position in the window (end of each bucket)"),
                   plot.get("ylabel", f"{stage} loss at those positions (nats)"))


def plot_bench_xy(ours: Ours, plot: dict[str, Any], path: Path) -> list[str]:
    """Metric `y` against record field `x`: one line per value of record field `group` of `run`
    (records matching `where`), or of several runs at once, each a side ``{run, where, label,
    legend, style}`` of `sides` (`label`: the record field naming a line, as in the claims;
    `legend`: its text, "{}" standing for that name; `style`: matplotlib keywords). ``per:
    <field>`` divides each value by a record field (``batch``: per sequence, for runs of
    different batch sizes; say so in `ylabel`). A line whose records ran out of memory says from
    which x in its legend."""
    from fa_train.repro.claims import first_oom, side_points   # they build on this module's readers
    sides = plot.get("sides") or [{"run": plot["run"], "where": plot.get("where"),
                                   "label": plot.get("group")}]
    spec = {"metric": plot["y"], "x": plot["x"], "per": plot.get("per")}
    series: dict[str, list[tuple[float, float]]] = {}
    styles: dict[str, dict[str, Any]] = {}
    for side in sides:
        ooms = first_oom(ours, spec, side)
        for x, points in side_points(ours, spec, side).items():
            for point in points:
                name = side.get("legend", "{}").format(point.label)
                if point.label in ooms:
                    name += f" (OOM from {plot['x']} {ooms[point.label]:g})"
                series.setdefault(name, []).append((x, point.value))
                styles[name] = side.get("style") or {}
    ylabel = plot.get("ylabel") or _metric_label(ours.recipe, plot["y"]) + (
        f" / {plot['per']}" if plot.get("per") else "")
    return plot_xy(series, plot, path, plot.get("xlabel", plot["x"]), ylabel, styles)


PLOTTERS = {"loss": plot_loss, "train_xy": plot_train_xy, "bench_xy": plot_bench_xy,
            "by_position": plot_by_position}
