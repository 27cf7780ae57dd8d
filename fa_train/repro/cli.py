"""`fa-repro`: run the paper's tables and figures as recipes, then report paper vs ours.

    fa-repro list
    fa-repro run RECIPE --scale smoke|gpu|full [--out DIR] [--only RUN] [--dry-run] [--in-process] [--jobs N]
                 [--gpus IDS] [--pause-after MINUTES] [--time-budget MINUTES]
    fa-repro report RECIPE [--scale S] [--out DIR]
    fa-repro merge SOURCE [--into DIR] [--only RUN]
    fa-repro prepare RECIPE --scale S [--only RUN]
    fa-repro results [--check]

RECIPE is a name (`table3_lra`) or a path (`recipes/table3_lra.yaml`). The default output
folder is reports/<recipe>/<scale>/. With --pause-after, each training run stops after MINUTES
and keeps its checkpoint; the same command run again (on this or another machine, with the
output folder carried over) continues the paused runs; --time-budget ends the invocation within
MINUTES, pausing training runs in time. `merge` brings an output folder made elsewhere (a GPU
host's scratch --out) into reports/: runs that finished later replace their entries. `prepare`
prepares the runs' data (a generated set, a tokenized corpus) without training, into the caches
the runs read, e.g. in the background while another recipe trains. `results`
renders README.md's results-at-a-glance table and RESULTS.md's measured tables from the
committed result files.
"""
from __future__ import annotations

import argparse
import sys

from fa_train.repro.recipe import SCALES, RecipeError, list_recipe_paths, load_recipe


def _minutes(text: str) -> float:
    """--pause-after's and --time-budget's value: a positive number of minutes."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of minutes, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fa-repro", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list recipes with their runs and scales")
    r = sub.add_parser("run", help="run a recipe at one scale (resumable)")
    r.add_argument("recipe")
    r.add_argument("--scale", choices=SCALES, required=True)
    r.add_argument("--out", default=None, help="output folder (default reports/<recipe>/<scale>)")
    r.add_argument("--only", action="append", default=None, metavar="RUN",
                   help="run only this run (repeatable)")
    r.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    r.add_argument("--force", action="store_true", help="rerun runs that are already done")
    r.add_argument("--in-process", action="store_true",
                   help="run in this process (no subprocess start-up; no OOM isolation or timeout)")
    r.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N runs at once on this machine (accuracy studies of small models; "
                        "reports show their times and throughput as 'GPU shared')")
    r.add_argument("--gpus", type=lambda s: s.split(","), default=None, metavar="IDS",
                   help="run one run per GPU at once (e.g. 0,1), each alone on its GPU: timings "
                        "stay the run's own")
    r.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each training run's checkpoints/ (deleted by default: GBs per run)")
    r.add_argument("--pause-after", type=_minutes, default=None, metavar="MINUTES",
                   help="pause each training run after MINUTES of wall time, keeping its "
                        "checkpoint; running the recipe again continues it, paused runs first and "
                        "the nearest to their end first")
    r.add_argument("--time-budget", type=_minutes, default=None, metavar="MINUTES",
                   help="end within MINUTES (a batch job's limit): training runs pause in time, "
                        "runs that would start too late wait for the next invocation")
    r.add_argument("--no-report", action="store_true", help="do not render report.md afterwards")
    m = sub.add_parser("merge", help="bring runs from another output folder into reports/ "
                                     "(those that finished later than the entries there)")
    m.add_argument("source", help="an output folder of `fa-repro run --out` (holds results.json)")
    m.add_argument("--into", default=None,
                   help="the folder to merge into (default reports/<recipe>/<scale>)")
    m.add_argument("--only", action="append", default=None, metavar="RUN",
                   help="merge only this run (repeatable)")
    prep = sub.add_parser("prepare", help="prepare the data of a recipe's training runs (generate, "
                                          "download, tokenize) without training them")
    prep.add_argument("recipe")
    prep.add_argument("--scale", choices=SCALES, required=True)
    prep.add_argument("--only", action="append", default=None, metavar="RUN",
                      help="prepare only this run's data (repeatable)")
    rep = sub.add_parser("report", help="render report.md and plots from a recipe's results")
    rep.add_argument("recipe")
    rep.add_argument("--scale", choices=SCALES, default=None,
                     help="default: the largest scale with results under reports/<recipe>/")
    rep.add_argument("--out", default=None)
    res = sub.add_parser("results", help="render README.md's glance table and RESULTS.md")
    res.add_argument("--check", action="store_true",
                     help="change nothing; exit 1 when either file is out of date")
    return p


def cmd_results(check: bool) -> int:
    from fa_train.repro.results import sync
    stale = sync(check=check)
    if check and stale:
        print(f"fa-repro: out of date: {', '.join(stale)}; run `fa-repro results`", file=sys.stderr)
        return 1
    print("up to date" if not stale else f"rewrote {', '.join(stale)}")
    return 0


def cmd_list() -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fa-repro recipes")
    for col in ("recipe", "title", "runs", "smoke / gpu / full runs"):
        table.add_column(col, overflow="fold")
    for path in list_recipe_paths():
        try:
            r = load_recipe(path)
        except RecipeError as exc:
            table.add_row(path.stem, f"[red]invalid: {exc}[/]", "", "")
            continue
        counts = " / ".join(str(len(r.scale_run_names(s))) for s in SCALES)
        table.add_row(r.name, r.title, ", ".join(r.run_names()), counts)
    Console().print(table)
    return 0


def cmd_merge(source: str, into: str | None, only: list[str] | None) -> int:
    from fa_train.repro.merge import merge_results, release_merged_sources
    from fa_train.repro.runner import RELEASED
    try:
        dest, taken = merge_results(source, into, only)
        released = release_merged_sources(dest)
    except RecipeError as exc:
        print(f"fa-repro: {exc}", file=sys.stderr)
        return 2
    print(f"{dest}: {len(taken)} run(s) merged" + (f" ({', '.join(taken)})" if taken else "")
          + "; fa-repro report renders it")
    for name in released:
        print(RELEASED.format(name))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return cmd_list()
    if args.command == "results":
        return cmd_results(args.check)
    if args.command == "merge":
        return cmd_merge(args.source, args.into, args.only)
    try:
        recipe = load_recipe(args.recipe)
        if args.command == "run":
            from fa_train.repro.report import render_report
            from fa_train.repro.runner import (InProcessExecutor, failed_runs, paused_runs,
                                              run_recipe)
            executor = InProcessExecutor() if args.in_process else None
            data = run_recipe(recipe, args.scale, out_dir=args.out, only=args.only,
                              dry_run=args.dry_run, executor=executor, force=args.force,
                              keep_checkpoints=args.keep_checkpoints, jobs=args.jobs,
                              pause_after=args.pause_after, gpus=args.gpus,
                              time_budget=args.time_budget)
            if args.dry_run:
                return 0
            if not args.no_report:
                path = render_report(recipe, args.scale, args.out)
                print(f"report: {path}", file=sys.stderr)
            paused = paused_runs(data)
            if paused:
                print(f"fa-repro: {len(paused)} run(s) paused ({', '.join(paused)}); run the same "
                      "command again to continue them", file=sys.stderr)
            bad = failed_runs(data)
            if bad:
                print(f"fa-repro: {len(bad)} run(s) failed: {', '.join(bad)}", file=sys.stderr)
                return 1
            return 0
        if args.command == "prepare":
            from fa_train.repro.runner import prepare_run_data
            prepare_run_data(recipe, args.scale, only=args.only)
            return 0
        from fa_train.repro.report import render_report
        from fa_train.repro.runner import RESULTS_FILE, default_out_dir
        scale = args.scale or next((s for s in reversed(SCALES)
                                    if (default_out_dir(recipe, s) / RESULTS_FILE).exists()), "gpu")
        path = render_report(recipe, scale, args.out)
        print(path)
        return 0
    except RecipeError as exc:
        print(f"fa-repro: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
