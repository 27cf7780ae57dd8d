"""report.md and PNGs rendered from fixture result files (no training)."""
import json

from fa_train.repro.recipe import PLOT_TYPES, validate_recipe
from fa_train.repro.report import Ours, render_report, row_order


def write_results(out, runs):
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({
        "recipe": "mini", "scale": "gpu", "created": "2026-01-01T00:00:00+00:00",
        "updated": "2026-01-01T01:00:00+00:00",
        "host": {"hostname": "h", "gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"]}, "runs": runs}))


def train_entry(name, ppl, tps, losses):
    return {"status": "ok", "kind": "train", "run_dir": name, "labels": {"impl": name, "seq_len": 1024},
            "overrides": {"trainer.max_steps": 100},
            "metrics": {"status": "ok", "val/ppl": ppl, "tokens_per_sec_per_device": tps,
                        "global_step": 100, "device_name": "NVIDIA H100 80GB HBM3"}}, losses


def test_report_tables_and_plots(mini_recipe, tmp_path):
    out = tmp_path / "reports"
    runs = {}
    for name, ppl, tps in (("base", 30.123, 1000.0), ("fast", 30.2, 3000.0)):
        entry, _ = train_entry(name, ppl, tps, None)
        runs[name] = entry
        (out / name).mkdir(parents=True)
        (out / name / "metrics.csv").write_text(
            "epoch,step,train/loss,val/loss\n0,0,10.0,\n0,1,9.0,\n0,1,,9.5\n0,2,8.0,\n")
    rows = [{"impl": impl, "seqlen": n, "pass": p, "status": "ok", "ms": ms}
            for impl, n, p, ms in (("standard", 128, "fwd+bwd", 4.0), ("flash", 128, "fwd+bwd", 1.0),
                                   ("standard", 256, "fwd+bwd", 9.0), ("flash", 256, "fwd+bwd", 2.0),
                                   ("flash", 256, "fwd", 0.5))]
    runs["bench"] = {"status": "ok", "kind": "bench", "run_dir": "bench",
                     "metrics": {"attention": {"environment": {"gpu": "NVIDIA H100"}, "rows": rows}}}
    write_results(out, runs)

    path = render_report(mini_recipe, "gpu", out)
    text = path.read_text()
    assert "| row | source | ppl | speedup (×) | tokens/s |" in text
    assert "| Baseline | paper | 18.2 | 1.0 | – |" in text
    assert "| Baseline | ours (gpu) | 30.12 | 1.00 | 1,000 |" in text
    assert "| Flash | ours (gpu) | 30.20 | 3.00 | 3,000 |" in text
    assert "| Other | paper | 20.0 | 2.0 | – |" in text
    assert "Other | ours" not in text                        # no run of ours for that row
    lines = text.splitlines()
    assert lines.index("| Extra (ours only) | ours (gpu) | 30.12 | 1.00 | 1,000 |") == \
        lines.index("| Flash | ours (gpu) | 30.20 | 3.00 | 3,000 |") + 1
    assert "| Flash | ours (gpu) | 4.5 |" in text            # max(4/1, 9/2) from the bench rows
    assert "NVIDIA H100 80GB HBM3" in text and "8x A100" in text
    assert "optimizer steps run: 100" in text and "400K steps" in text
    for png in ("loss.png", "tps.png", "runtime.png"):
        assert (out / png).stat().st_size > 1000, png
        assert f"]({png})" in text


def test_report_says_what_is_missing(mini_recipe, tmp_path):
    out = tmp_path / "reports"
    runs = {"base": {"status": "oom", "kind": "train", "error": "CUDA out of memory", "metrics": {}},
            "fast": {"status": "failed", "kind": "train", "error": "ValueError: x | y", "metrics": {}}}
    write_results(out, runs)
    text = render_report(mini_recipe, "smoke", out).read_text()
    assert "| Baseline | ours (smoke) | OOM | n/a | OOM |" in text
    assert "| Flash | ours (smoke) | failed |" in text
    assert "| base | oom | CUDA out of memory |" in text
    assert "| fast | failed | ValueError: x \\| y |" in text
    assert "no data yet" in text and "not comparable" in text
    assert "| bench | bench | not run |" not in text and "| bench |  | not run |" in text


def test_report_without_results(mini_recipe, tmp_path):
    text = render_report(mini_recipe, "gpu", tmp_path / "empty").read_text()
    assert "| Baseline | ours (gpu) | not run |" in text and "statuses none yet" in text


def test_row_order():
    assert row_order(["A", "B", "C"], ["B", "B2", "A"]) == ["A", "B", "B2", "C"]
    assert row_order(["A"], ["X", "A"]) == ["X", "A"]
    assert row_order([], ["X", "Y"]) == ["X", "Y"]


def test_paused_runs_show_progress_and_curves_so_far(mini_recipe, tmp_path):
    out = tmp_path / "reports"
    entry, _ = train_entry("base", 30.0, 1000.0, None)
    entry.update(status="paused", stretches=2)
    entry["metrics"] = {"status": "paused", "global_step": 40, "epoch": 3, "val/loss": 9.5}
    (out / "base").mkdir(parents=True)
    (out / "base" / "metrics.csv").write_text("epoch,step,train/loss\n0,0,10.0\n0,1,9.0\n0,2,8.0\n")
    (out / "base" / "config.yaml").write_text("trainer:\n  max_steps: 100\n")
    write_results(out, {"base": entry})
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Baseline | ours (gpu) | paused |" in text          # no final number from a pause
    assert "| base | 40 | 100 | 3 | val/loss 9.5 | 2 | not kept | – |" in text   # no times logged
    assert "Runs that did not finish" not in text
    assert (out / "loss.png").stat().st_size > 1000 and "](loss.png)" in text
    entry["started"], entry["finished"] = "2026-01-02T00:00:00+00:00", "2026-01-02T00:10:00+00:00"
    write_results(out, {"base": entry})
    (out / "base" / "checkpoints").mkdir()
    (out / "base" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (out / "base" / "metrics.csv").write_text(
        "epoch,step,time/train_s,train/loss\n0,10,600,9.0\n0,20,1200,8.0\n0,30,1500,7.0\n")
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| base | 40 | 100 | 3 | val/loss 9.5 | 2 | kept | 45.0 |" in text   # 60 steps of 45 s
    assert "Runs made 2026-01-02T00:00:00+00:00 to 2026-01-02T00:10:00+00:00" in text
    for shared, left in ((25, "60.0"), (15, "–")):   # timed only while it had the GPU alone
        write_results(out, {"base": dict(entry, shared_from_step=shared)})
        assert f"| 2 | kept | {left} |" in render_report(mini_recipe, "gpu", out).read_text()


def test_diverged_runs_say_where_whether_recorded_so_or_only_by_their_loss(mini_recipe, tmp_path):
    """A run recorded "diverged" and one recorded "ok" whose training loss stayed NaN to its end
    both show "diverged at step N" (N: the recorded step, else where the NaNs began in
    metrics.csv) instead of a number, and their curves are drawn; a single NaN at the end is not
    divergence."""
    out = tmp_path / "reports"
    base, _ = train_entry("base", 30.0, 1000.0, None)
    base.update(status="diverged", error="training diverged by step 50: parameters not finite")
    base["metrics"].update(status="diverged", diverged_at_step=50)
    fast, _ = train_entry("fast", 2.3, 3000.0, None)
    fast["metrics"]["train_loss_last"] = float("nan")
    for name in ("base", "fast"):
        (out / name).mkdir(parents=True)
        (out / name / "metrics.csv").write_text(
            "epoch,step,train/loss\n0,0,10.0\n0,1249,nan\n0,1259,nan\n")
    other, _ = train_entry("other", 2.4, 3000.0, None)   # one NaN at the end: not divergence
    other["metrics"]["train_loss_last"] = float("nan")
    (out / "other").mkdir(parents=True)
    (out / "other" / "metrics.csv").write_text("epoch,step,train/loss\n0,0,10.0\n0,9,nan\n")
    write_results(out, {"base": base, "fast": fast, "other": other})
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert Ours(mini_recipe, out).status("other") == "ok"
    assert "| Baseline | ours (gpu) | diverged at step 50 |" in text
    assert "| Flash | ours (gpu) | diverged at step 1,249 |" in text
    assert "| fast | diverged | training loss not finite from step 1249 on |" in text
    assert "statuses 2 diverged, 1 ok" in text and (out / "loss.png").stat().st_size > 1000


def test_a_stalled_run_says_where(mini_recipe, tmp_path):
    """A classifier stopped because no gradient reached below its head shows "stalled at step N"
    instead of a number, and its curve is drawn."""
    out = tmp_path / "reports"
    base, _ = train_entry("base", 30.0, 1000.0, None)
    base.update(status="stalled", error="training stalled by step 50: no gradient")
    base["metrics"].update(status="stalled", stalled_at_step=50)
    (out / "base").mkdir(parents=True)
    (out / "base" / "metrics.csv").write_text("epoch,step,train/loss\n0,0,0.70\n0,49,0.69\n")
    write_results(out, {"base": base})
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Baseline | ours (gpu) | stalled at step 50 |" in text
    assert "statuses 1 stalled" in text and (out / "loss.png").stat().st_size > 1000


def test_a_cell_of_several_runs_is_the_mean_of_those_done(mini_recipe, tmp_path):
    out = tmp_path / "reports"
    mini_recipe.data["report"]["tables"][0]["rows"]["Flash"] = {
        "ppl": ["base", "fast"], "speedup": ["base", "fast"], "tokens/s": ["base", "fast"]}
    assert validate_recipe(mini_recipe) == []
    runs = {name: train_entry(name, ppl, tps, None)[0]
            for name, ppl, tps in (("base", 30.0, 1000.0), ("fast", 31.0, 3000.0))}
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu) | 30.50 | 2.00 | 2,000 |" in text       # means of the two
    runs["fast"]["status"] = "paused"
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu) | 30.00 (1 of 2 seeds) | 1.00 | 1,000 (1 of 2 seeds) |" in text
    runs["base"]["status"] = "paused"
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu) | paused | n/a | paused |" in text
    runs["fast"].update(status="stalled")                  # no value: each seed says why
    runs["fast"]["metrics"].update(status="stalled", stalled_at_step=50)
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu) | paused / stalled at step 50 |" in text


def test_speedups_only_within_one_gpu_model_and_rows_name_their_gpu(mini_recipe, tmp_path):
    out = tmp_path / "reports"
    runs = {name: train_entry(name, 30.0, tps, None)[0] for name, tps in (("base", 1000.0), ("fast", 3000.0))}
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu) | 30.00 | 3.00 | 3,000 |" in text     # one GPU model: no names
    runs["fast"]["metrics"]["device_name"] = "NVIDIA H200"
    write_results(out, runs)
    text = render_report(mini_recipe, "gpu", out).read_text()
    assert "| Flash | ours (gpu, NVIDIA H200) | 30.00 | baseline on another GPU | 3,000 |" in text
    assert "| Baseline | ours (gpu, NVIDIA H100 80GB HBM3) | 30.00 | 1.00 | 1,000 |" in text


def test_one_bench_plot_draws_several_runs_per_sequence(mini_recipe, tmp_path, monkeypatch):
    """A bench_xy plot with `sides` draws a line per side and record label across runs of
    different batch sizes, each value divided by its record's batch (`per: batch`); a line that
    ran out of memory says from which x."""
    import matplotlib.pyplot as plt

    from fa_train.repro.plots import plot_bench_xy
    out = tmp_path / "reports"

    def rows(impl, batches, ooms=()):
        return [{"impl": impl, "seqlen": n, "batch": b, "pass": "fwd+bwd", "status": "ok",
                 "ms": 8.0 * n / 128} for n, b in batches] + \
               [{"impl": impl, "seqlen": n, "batch": 1, "pass": "fwd+bwd", "status": "OOM",
                 "ms": None} for n in ooms]
    dense = rows("standard", [(128, 128), (256, 64)], ooms=[512, 1024]) + rows("flash", [(128, 128)])
    write_results(out, {
        "bench": {"status": "ok", "kind": "bench", "metrics": {"attention": {"rows": dense}}},
        "sparse": {"status": "ok", "kind": "bench", "metrics": {"blocksparse": {"rows": rows(
            "blocksparse", [(128, 512), (256, 256)])}}}})
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    plot = {"type": "bench_xy", "x": "seqlen", "y": "ms", "per": "batch", "logx": True,
            "sides": [{"run": "bench", "where": {"impl": "standard"}, "label": "impl"},
                      {"run": "sparse", "legend": "block-sparse"}]}
    drawn = plot_bench_xy(Ours(mini_recipe, out), plot, out / "all.png")
    assert drawn == ["standard (OOM from seqlen 512)", "block-sparse"]
    assert (out / "all.png").stat().st_size > 1000
    lines = {line.get_label(): list(line.get_ydata()) for line in kept[0].axes[0].get_lines()}
    assert lines == {"standard (OOM from seqlen 512)": [8.0 / 128, 16.0 / 64],
                     "block-sparse": [8.0 / 512, 16.0 / 256]}
    assert kept[0].axes[0].get_ylabel() == "ms (ms) / batch"


def test_loss_by_position_plot_draws_runs_that_logged_it(mini_recipe, tmp_path, monkeypatch):
    """One line per run from its last val/loss_pos<lo>-<hi> values, x at each bucket's end; runs
    without them are left out; an unknown plot type is named by the recipe check."""
    from fa_train.repro import plots
    out = tmp_path / "reports"
    base, _ = train_entry("base", 30.0, 1000.0, None)
    base["metrics"].update({"val/loss_pos0-1": 7.0, "val/loss_pos1-2": 5.0, "val/loss_pos2-4": 4.0,
                            "test/loss_pos0-1": 9.0})
    fast, _ = train_entry("fast", 30.0, 1000.0, None)
    write_results(out, {"base": base, "fast": fast})
    drawn = {}
    monkeypatch.setattr(plots, "plot_xy", lambda series, plot, path, xlabel, ylabel, styles=None:
                        drawn.update(series=series, logx=plot["logx"]) or list(series))
    plot = {"type": "by_position", "title": "by position", "file": "pos.png"}
    assert plots.plot_by_position(Ours(mini_recipe, out), plot, out / "pos.png") == ["base"]
    assert sorted(drawn["series"]["base"]) == [(1.0, 7.0), (2.0, 5.0), (4.0, 4.0)] and drawn["logx"]
    mini_recipe.data["report"]["plots"].append({"type": "by_postion", "title": "typo"})
    assert any("type must be one of loss, train_xy, bench_xy, by_position, got 'by_postion'" in p
               for p in validate_recipe(mini_recipe))
    assert set(plots.PLOTTERS) == set(PLOT_TYPES)
