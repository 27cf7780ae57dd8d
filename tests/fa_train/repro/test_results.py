"""`fa-repro results`: README.md's glance table and RESULTS.md, rendered from the result files."""
import json
import shutil

import pytest

from fa_train.repro.cli import main
from fa_train.repro.recipe import list_recipe_paths, load_recipe
from fa_train.repro.results import BEGIN, GLANCE_BEGIN, GLANCE_END, ROOT, glance_table, sync


def test_committed_pages_are_up_to_date():
    assert sync(check=True) == []
    assert main(["results", "--check"]) == 0


def test_stale_pages_are_found_then_rewritten(tmp_path):
    for name in ("README.md", "RESULTS.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    readme = (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text(
        readme[:readme.index(GLANCE_BEGIN)] + f"{GLANCE_BEGIN}\n| stale |\n{GLANCE_END}"
        + readme[readme.index(GLANCE_END) + len(GLANCE_END):])
    results = (tmp_path / "RESULTS.md").read_text()
    (tmp_path / "RESULTS.md").write_text(results.replace(BEGIN, BEGIN + "\nhand-typed 999"))
    assert sync(check=True, root=tmp_path) == ["README.md", "RESULTS.md"]
    assert sync(root=tmp_path) == ["README.md", "RESULTS.md"]
    assert sync(check=True, root=tmp_path) == []
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()


def test_missing_markers_are_named(tmp_path):
    (tmp_path / "README.md").write_text("no markers")
    (tmp_path / "RESULTS.md").write_text("no markers")
    with pytest.raises(ValueError, match="README.md lacks"):
        sync(check=True, root=tmp_path)


def test_glance_has_one_row_per_recipe_with_the_papers_number():
    rows = glance_table()[2:]
    recipes = [load_recipe(p) for p in list_recipe_paths()]
    assert len(rows) == len(recipes)
    for row, recipe in zip(rows, recipes):
        spec = recipe.report["glance"]
        table = recipe.paper["tables"][recipe.report["tables"][0]["paper_table"]]
        rows_, cols = (v if isinstance(v, list) else [v] for v in (spec["paper"]["row"], spec["paper"]["column"]))
        paper = " / ".join(str(table["rows"][r][list(table["columns"]).index(c)])
                           for r in rows_ for c in cols)
        label = spec["paper"].get("label") or " / ".join(rows_)
        assert f"{label}, {' / '.join(cols)}: {paper}" in row
        assert f"reports/{recipe.name}/" in row or "not run yet" in row


def glance_of(mini_recipe, tmp_path, monkeypatch, statuses):
    """The mini recipe's glance row over results folders {folder: status of its one run}."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    cell = {"row": "Baseline", "column": "ppl"}
    mini_recipe.data["report"]["glance"] = {"paper": cell, "ours": cell}
    entry = {"kind": "train", "run_dir": "base", "metrics": {"val/ppl": 30.0, "global_step": 9}}
    for folder, status in statuses.items():
        out = tmp_path / "reports" / "mini" / folder
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(
            {"host": {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"]}, "updated": "2026-01-02",
             "runs": {"base": dict(entry, status=status)}}))
    return results._glance_row(mini_recipe)


def test_glance_skips_a_larger_scale_whose_cell_has_no_value(mini_recipe, tmp_path, monkeypatch):
    """A full scale with only paused runs does not hide the gpu scale's finished number."""
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"full": "paused", "gpu": "ok"})
    assert "reports/mini/gpu/report.md" in row and ": 30" in row
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu": "failed"})
    assert "reports/mini/full/report.md" in row and "paused" in row


def test_glance_falls_back_to_a_scales_earlier_protocol(mini_recipe, tmp_path, monkeypatch):
    """A redesigned scale not yet run: the glance shows the kept earlier protocol's number and
    links its folder; without any value it shows the current scale's status."""
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu": "paused", "gpu-100steps": "ok"})
    assert "reports/mini/gpu-100steps/report.md" in row
    row = glance_of(mini_recipe, tmp_path, monkeypatch, {"gpu-100steps": "failed"})
    assert "reports/mini/gpu/report.md" in row and "paused" in row


def test_glance_shows_several_rows_side_by_side(mini_recipe, tmp_path, monkeypatch):
    """Runs that split (seeds) are shown together: one value per row, under the spec's label."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    mini_recipe.data["report"]["glance"] = {
        "paper": {"row": "Baseline", "column": "ppl"},
        "ours": {"row": ["Baseline", "Flash"], "label": "both runs", "column": "ppl"}}
    out = tmp_path / "reports" / "mini" / "gpu"
    out.mkdir(parents=True)
    runs = {name: {"kind": "train", "run_dir": name, "status": status,
                   "metrics": {"val/ppl": ppl, "global_step": 9}}
            for name, ppl, status in (("base", 30.0, "ok"), ("fast", 25.5, "paused"))}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-01-02", "runs": runs}))
    row = results._glance_row(mini_recipe)
    assert "both runs, ppl: 30.00 / paused" in row and "reports/mini/gpu/report.md" in row


def test_glance_shows_several_columns_side_by_side(mini_recipe, tmp_path, monkeypatch):
    """Several columns of one row (tasks): the paper's values and ours in the same order."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    row, cols = "Baseline", ["ppl", "speedup"]
    mini_recipe.data["report"]["glance"] = {"paper": {"row": row, "column": cols},
                                            "ours": {"row": row, "column": cols}}
    out = tmp_path / "reports" / "mini" / "gpu"
    out.mkdir(parents=True)
    base = {"kind": "train", "run_dir": "base", "status": "ok",
            "metrics": {"val/ppl": 30.0, "tokens_per_sec_per_device": 1000.0}}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-01-02", "runs": {"base": base}}))
    glance = results._glance_row(mini_recipe)
    assert f"{row}, ppl / speedup: 18.2 / 1.0 |" in glance    # the paper's (units differ: none)
    assert f"{row}, ppl / speedup: 30.00 / 1.00 |" in glance   # ours, each column its format


def test_glance_date_is_when_the_cells_runs_finished(mini_recipe, tmp_path, monkeypatch):
    """A results file updated later by other runs keeps the date of the run the glance cell shows."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    cell = {"row": "Baseline", "column": "ppl"}
    mini_recipe.data["report"]["glance"] = {"paper": cell, "ours": cell}
    out = tmp_path / "reports" / "mini" / "gpu"
    out.mkdir(parents=True)
    runs = {"base": {"kind": "train", "run_dir": "base", "status": "ok", "finished": "2026-01-02T10:00",
                     "metrics": {"val/ppl": 30.0}},
            "fast": {"kind": "train", "run_dir": "fast", "status": "paused", "finished": "2026-03-04T10:00",
                     "metrics": {}}}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-03-04T10:00", "runs": runs}))
    row = results._glance_row(mini_recipe)
    assert ": 30.00" in row and "| H100, 2026-01-02 |" in row
    del runs["base"]["finished"]                  # no run date: the file's
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100, 80 GiB"]},
                                                  "updated": "2026-03-04T10:00", "runs": runs}))
    assert "| H100, 2026-03-04 |" in results._glance_row(mini_recipe)


def lm_results(root, recipe, runs, curves=None):
    """A fake gpu results.json of `recipe` under root/reports ({run: metrics}, all ok on one
    H100) and each run's metrics.csv from `curves` ({run: csv text})."""
    out = root / "reports" / recipe / "gpu"
    out.mkdir(parents=True)
    entries = {name: {"status": "ok", "kind": "train", "run_dir": name,
                      "finished": "2026-12-01T10:00:00", "labels": {},
                      "metrics": {"device_name": "NVIDIA H100 80GB HBM3", **metrics}}
               for name, metrics in runs.items()}
    (out / "results.json").write_text(json.dumps({"host": {"gpus": ["H100"]},
                                                  "updated": "2026-12-01", "runs": entries}))
    for name, text in (curves or {}).items():
        (out / name).mkdir()
        (out / name / "metrics.csv").write_text(text)


def gpt2(ppl, tps):
    return {"val/ppl": ppl, "tokens_seen": 131072000, "tokens_per_sec_per_device": tps,
            "time/train_s": 300.0}


def test_lm_sections_say_not_run_yet_before_their_runs(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    for name in ("table4_gpt2_context", "table2_gpt2", "table1_bert"):
        n = len(load_recipe(name).runs("gpu"))
        lines = results.scale_runs(name, "Runs", ("tokens",))
        assert lines[1] == (f"Runs (recipe {name}): not run yet at the gpu scale ({n} runs; their "
                            f"GPU time: `scales.gpu.hardware` of `recipes/{name}.yaml`).")
        claims = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
        assert claims and all(c.endswith("| not run yet | – |") for c in claims)
        assert not any("| yes |" in line or "| no |" in line for line in lines)     # no run rows


def test_table4_section_rows_and_claims_from_the_gpu_results(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    runs = {"standard-1k": gpt2(40.0, 200000.0), "flash-1k": gpt2(39.9, 400000.0),
            "flash-2k": gpt2(38.0, 370000.0), "flash-4k": gpt2(37.0, 310000.0)}
    lm_results(tmp_path, "table4_gpt2_context", runs)
    lines = results.scale_runs("table4_gpt2_context", "GPT-2", ("ppl", "tokens", "tokens_per_s",
                                                                "train_min"))
    assert lines[1] == ("GPT-2 (recipe table4_gpt2_context, scale gpu; "
                        "`reports/table4_gpt2_context/gpu/results.json`), one row per run:")
    assert lines[3] == ("| run | attention | torch.compile | validation perplexity (perplexity) | "
                        "tokens trained on (M tokens) | training throughput (tokens/s/GPU) | "
                        "training time (validation excluded) (min) | GPU | finished |")
    assert "| flash-4k | flash | yes | 37.00 | 131.1 | 310,000 | 5.0 | NVIDIA H100 80GB HBM3 | " \
           "2026-12-01 |" in lines
    assert any(line.startswith("| 1 | Longer context") and line.endswith(
        "| FlashAttention · 4K: 37.00 < FlashAttention · 2K: 38.00 < FlashAttention · 1K: 39.90 "
        "| holds |") for line in lines)
    assert any(line.startswith("| 2 | ") and line.endswith(
        "| Megatron-LM · 1K: 1.00× < FlashAttention · 4K: 1.55× | holds |") for line in lines)
    shutil.rmtree(tmp_path / "reports")
    runs.update({"flash-2k": gpt2(41.0, 370000.0)})           # 2K worse than 1K: not the order
    del runs["flash-1k"]
    lm_results(tmp_path, "table4_gpt2_context", runs)
    lines = results.scale_runs("table4_gpt2_context", "GPT-2", ("ppl",))
    assert "| flash-1k | flash | yes | not run yet | – | – |" in lines
    assert any(line.startswith("| 1 | ") and line.endswith("| flash-1k: not run yet | – |")
               for line in lines)


def test_table4_lag_sentence_reads_the_gap_columns(tmp_path, monkeypatch):
    """Each longer context against the next shorter one, at the widest and at the end, from the
    runs' validation curves over tokens seen."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    assert results.context_lag() == []
    curve = "step,tokens_seen,val/loss\n99,100,{}\n199,200,{}\n"
    lm_results(tmp_path, "table4_gpt2_context",
               {n: gpt2(40.0, 1.0) for n in ("flash-1k", "flash-2k", "flash-4k")},
               {"flash-1k": curve.format(5.0, 3.0), "flash-2k": curve.format(5.5, 3.1),
                "flash-4k": curve.format(5.6, 3.5)})
    line = results.context_lag()[1]
    assert ("2K minus 1K: 0.500 nats at the widest, 0.100 at the end; 4K minus 2K: 0.400 nats at "
            "the widest, 0.400 at the end.") in line


def test_table1_reach_sentence_reads_the_report_columns(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    assert results.bert_reach() == []
    curve = "step,time/train_s,val/mlm_acc\n99,{},0.10\n199,{},0.15\n"
    lm_results(tmp_path, "table1_bert", {"base-standard": {}, "base-flash": {}},
               {"base-standard": curve.format(30, 60), "base-flash": curve.format(10, 30)})
    line = results.bert_reach()[1]
    assert ("BERT-base · flash: 2.50 (2.00-3.00 over 2 levels up to 15.0) times faster, the curves "
            "at most 0.00 points apart.") in line


@pytest.mark.parametrize("draws, nearer", [(2.6, "flash-1k's (the context length"),
                                           (2.8, "flash-4k's (fewer spans per step")])
def test_table4_draws_sentence_applies_the_recipe_rule(tmp_path, monkeypatch, draws, nearer):
    """A 4K-draws run's final validation loss placed between its own context's and flash-4k's,
    the nearer one naming the explanation; its loss by position from position 128."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    runs = {n: {**gpt2(40.0, 1.0), "val/loss": v}
            for n, v in (("flash-1k", 2.5), ("flash-2k", 2.6), ("flash-4k", 2.9))}
    runs["flash-1k-draws4k"] = {**gpt2(40.0, 1.0), "val/loss": draws, "val/loss_pos0-1": 5.0,
                                "val/loss_pos512-1024": 2.55, "val/loss_pos128-256": 2.7}
    lm_results(tmp_path, "table4_gpt2_context", runs)
    line = results.context_lag()[-1]
    assert f"flash-1k-draws4k {draws:.3f} between flash-1k 2.500 and flash-4k 2.900" in line
    assert f"nearer {nearer}" in line
    assert "flash-2k-draws4k" not in line.split("by position")[0]          # not run: no sentence
    assert "flash-1k-draws4k 128-256 2.700, 512-1024 2.550;" in line


@pytest.mark.parametrize("sdpa, verdict", [(2.915, "within it: the 4K lag is not our kernel's"),
                                           (2.95, "outside it: our kernel is implicated")])
def test_table4_kernel_check_applies_the_recipe_rule(tmp_path, monkeypatch, sdpa, verdict):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    runs = {n: {**gpt2(40.0, 1.0), "val/loss": v}
            for n, v in (("flash-1k", 2.5), ("flash-2k", 2.6), ("flash-4k", 2.9))}
    lm_results(tmp_path, "table4_gpt2_context", runs)
    assert "sdpa-4k" not in " ".join(results.context_lag())            # not run: no sentence
    shutil.rmtree(tmp_path / "reports")
    lm_results(tmp_path, "table4_gpt2_context", {**runs, "sdpa-4k": {**gpt2(40.0, 1.0), "val/loss": sdpa}})
    line = results.context_lag()[-1]
    assert f"sdpa-4k {sdpa:.3f}, flash-4k 2.900, {sdpa - 2.9:+.3f} nats, {verdict}." in line


def test_table4_kernel_check_gives_the_speeds_of_one_gpu_model_only(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    runs = {"flash-4k": {"val/loss": 2.9}, "sdpa-4k": {**gpt2(40.0, 330.0), "val/loss": 2.91},
            "flash-4k-nope": {**gpt2(40.0, 300.0), "val/loss": 3.2}}
    lm_results(tmp_path, "table4_gpt2_context", runs, {"sdpa-4k": "step,train/loss\n9,8.50\n19,8.40\n",
                                                       "flash-4k": "step,train/loss\n9,8.49\n19,8.43\n29,7.0\n"})
    assert ("The same data and order: their training losses at the first 2 logged steps (to step 19) differ "
            "by at most 0.0300.") in " ".join(results.context_lag())
    assert ("Speed on one GPU model (NVIDIA H100 80GB HBM3): sdpa-4k 330 tokens/s, flash-4k-nope (our "
            "kernel; the same model but its position table) 300: PyTorch's attention 1.100x ours") \
        in " ".join(results.context_lag())
    shutil.rmtree(tmp_path / "reports")
    runs["sdpa-4k"]["device_name"] = "NVIDIA H200"
    lm_results(tmp_path, "table4_gpt2_context", runs)
    assert "Speed on one GPU model" not in " ".join(results.context_lag())


@pytest.mark.parametrize("run4k, loss, sentence", [
    ("flash-4k-nope", 2.45, "-0.050 nats, at or below it: once no position table has to be learned, the "
                            "longer context helps"),
    ("flash-4k-nope", 3.0, "+0.500 nats, above it, by more than with the learned table (+0.400): the table "
                           "does not explain"),
    ("flash-4k-nope", 2.6, "+0.100 nats, above it, by less than with the learned table (+0.400): the table "
                           "explains 75% of"),
    ("flash-4k-docs", 2.65, "+0.150 nats against +0.400 with attention across documents, at most half of "
                            "it: attention across documents explains most of the lag"),
    ("flash-4k-docs", 2.75, "+0.250 nats against +0.400 with attention across documents, more than half"),
])
def test_table4_position_and_document_checks_apply_the_recipe_rules(tmp_path, monkeypatch, run4k, loss,
                                                                     sentence):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    run1k = run4k.replace("4k", "1k")
    runs = {n: {**gpt2(40.0, 1.0), "val/loss": v} for n, v in (("flash-1k", 2.5), ("flash-4k", 2.9), (run1k, 2.5))}
    lm_results(tmp_path, "table4_gpt2_context", runs)
    assert run4k not in " ".join(results.context_lag())               # not run: no sentence
    shutil.rmtree(tmp_path / "reports")
    lm_results(tmp_path, "table4_gpt2_context", {**runs, run4k: {**gpt2(40.0, 1.0), "val/loss": loss}})
    line = results.context_lag()[-1]
    assert f"final validation loss {run4k} {loss:.3f}, {run1k} 2.500, {sentence}" in line


def test_table4_cpu_study_sentence_reads_its_json(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    assert results.context_lag_cpu() == []
    study = tmp_path / "reports/bench/context_lag"
    study.mkdir(parents=True)

    def run(window, loss):
        return {"seq_len": window,
                "scored": {"loss": loss, "by_position": {"0-1": loss + 2, "64-128": loss - 0.1}}}

    (study / "equal_tokens.json").write_text(json.dumps({
        "date": "2026-11-29", "torch": "2.13.0", "steps": 800, "step_tokens": 2048,
        "draw_tokens": 512, "score_window": 128, "margin_nats": 0.05, "gap_nats": 0.2,
        "verdict": "the longer window learned slower", "runs": {"window128": run(128, 4.5),
                                                               "window512": run(512, 4.7)}}))
    line = results.context_lag_cpu()[1]
    assert "windows 128 and 512, attention=sdpa, learned positions, 800 steps of 2,048 tokens" in line
    assert "window512 4.700 (position 0: 6.700, positions 64-127: 4.600)" in line
    assert "gap +0.200 nats against the rule's 0.05: the longer window learned slower." in line
    assert "Why" not in line
    data = json.loads((study / "equal_tokens.json").read_text())
    data["local_verdict"] = "nearer window 128's: attending further back explains most of the lag"
    (study / "equal_tokens.json").write_text(json.dumps(data))
    assert ("the rule fixed before it ran names the nearer run): nearer window 128's: attending "
            "further back explains most of the lag.") in results.context_lag_cpu()[1]
    data.update(nope_gap_nats=0.05, nope_verdict="the learned position table explains most of the lag")
    (study / "equal_tokens.json").write_text(json.dumps(data))
    assert ("under half the learned-position one): +0.050 nats, the learned position table "
            "explains most of the lag.") in results.context_lag_cpu()[1]


@pytest.mark.parametrize("gap, verdict", [(0.03, "holds"), (0.08, "does not hold")])
def test_table2_claim_is_the_largest_validation_loss_gap(tmp_path, monkeypatch, gap, verdict):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    loss = {"val/ppl": 50.0, "loss_end": 3.9}
    lm_results(tmp_path, "table2_gpt2", {"small-standard-compiled": loss, "small-flash": loss}, {
        "small-standard-compiled": "step,val/loss\n100,5.0\n200,4.5\n300,4.0\n",
        "small-flash": f"step,val/loss\n100,5.01\n200,{4.5 + gap}\n300,3.99\n"})
    lines = results.scale_runs("table2_gpt2", "GPT-2", ("ppl", "loss_end"))
    assert ("| small-standard-compiled | standard, compiled | yes | 50.00 | 3.900 | "
            "NVIDIA H100 80GB HBM3 | 2026-12-01 |") in lines
    assert any(line.startswith("| 1 | ") and line.endswith(f"| {gap:.3f} | {verdict} |")
               for line in lines)


def test_table1_claim_is_flash_before_standard_to_the_threshold(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    csv = "step,time/train_s,val/mlm_acc\n100,{0},0.10\n200,{1},0.31\n"
    lm_results(tmp_path, "table1_bert", {"base-standard": {}, "base-flash": {}},
               {"base-standard": csv.format(300, 600), "base-flash": csv.format(200, 480)})
    lines = results.scale_runs("table1_bert", "BERT", ("to30",))
    assert "| base-flash | flash | no | 8.0 | NVIDIA H100 80GB HBM3 | 2026-12-01 |" in lines
    assert "| base-standard-compiled | standard | yes | not run yet | – | – |" in lines
    assert any(line.endswith("| BERT-base · standard (ours only): 1.00 < BERT-base · flash "
                             "(ours only): 1.25 | holds |") for line in lines)      # 10 / 8 min


def test_glance_tallies_the_papers_claims(ordered, tmp_path, monkeypatch):
    """The claims column counts the verdicts of the claims table at the gpu scale."""
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    cell = {"row": "Baseline", "column": "ppl"}
    ordered.data["report"]["glance"] = {"paper": cell, "ours": cell}
    assert "| not run yet | 2 claims, not run yet |" in results._glance_row(ordered)

    def write(fast_status):
        out = tmp_path / "reports" / "mini" / "gpu"
        out.mkdir(parents=True, exist_ok=True)
        runs = {name: {"kind": "train", "run_dir": name, "status": status,
                       "metrics": {"val/ppl": ppl, "tokens_per_sec_per_device": tps,
                                   "device_name": "H100"}}
                for name, ppl, tps, status in (("base", 30.0, 1000.0, "ok"),
                                               ("fast", 25.5, 900.0, fast_status))}
        (out / "results.json").write_text(json.dumps({"updated": "2026-01-02", "runs": runs}))
        return results._glance_row(ordered)

    assert "| 1 of 2 hold, 1 does not (gpu) |" in write("ok")
    assert "| 0 of 2 hold, 2 not measured yet (gpu) |" in write("paused")


def _pathfinder_arms(tmp_path, fly, path64):
    """Fake pathfinder32_learning gpu results: each arm's two seeds as (test acc, best val acc);
    a seed's validation curve reaches its best val acc at step 200."""
    runs, curves = {}, {}
    for arm, spt, accs in (("fly-spt", "spt", fly), ("path64model", "path64model-spt", path64)):
        for seed, (test, val) in enumerate(accs):
            name = f"{arm}-seed{seed}"
            runs[name] = {"test/acc": test, "val/acc": val}
            curves[name] = f"step,val/acc\n100,0.5\n200,{val}\n"
            runs[f"{spt}-seed{seed}"] = {"val/acc": 0.66 if arm == "fly-spt" else 0.8,
                                          "val/acc_majority": 0.659}
    lm_results(tmp_path, "pathfinder32_learning", runs, curves)


@pytest.mark.parametrize("fly, path64, verdict", [
    ([(0.5, 0.5), (0.53, 0.53)], [(0.5, 0.5), (0.7, 0.7)],
     "the Path-64 model reached 65% on 1 of 2 seeds: its shape learns Pathfinder-32"),
    ([(0.7, 0.7), (0.53, 0.53)], [(0.5, 0.5), (0.6, 0.6)],
     "the fly model reached 65% and the Path-64 model did not: the shape is the cause"),
    ([(0.5, 0.5), (0.53, 0.53)], [(0.5, 0.5), (0.635, 0.63)],
     "neither arm reached 65%, so the control did not learn on this schedule either; the Path-64 "
     "model went further (best seed 63.5% test against 53.0%): nothing here blames its shape"),
    ([(0.5, 0.5), (0.6, 0.6)], [(0.5, 0.5), (0.55, 0.55)],
     "neither arm reached 65%; the fly model went further (best seed 60.0% test against 55.0%): "
     "the shape may be part of the cause"),
])
def test_pathfinder_shape_check_applies_the_recipe_rule(tmp_path, monkeypatch, fly, path64, verdict):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    assert results.pathfinder_shapes() == []                       # not run: no sentence
    _pathfinder_arms(tmp_path, fly, path64)
    line = results.pathfinder_shapes()[1]
    assert f"): {verdict}" in line
    assert "masked-pixel validation accuracy at the end of self-pretraining, fly 66.0 / 66.0, " \
           "Path-64 model 80.0 / 80.0, where always answering black scores 65.9 / 65.9" in line
    assert "100-epoch schedule" not in line                        # no full-scale results here


def test_pathfinder_shape_check_waits_for_every_run(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    _pathfinder_arms(tmp_path, [(0.5, 0.5), (0.5, 0.5)], [(0.5, 0.5), (0.7, 0.7)])
    path = tmp_path / "reports/pathfinder32_learning/gpu/results.json"
    data = json.loads(path.read_text())
    data["runs"]["path64model-seed1"]["status"] = "paused"
    path.write_text(json.dumps(data))
    assert results.pathfinder_shapes() == []


def test_path64_long_sentence_reads_each_seed(tmp_path, monkeypatch):
    from fa_train.repro import results
    monkeypatch.setattr(results, "ROOT", tmp_path)
    assert results.path64_long() == []
    lm_results(tmp_path, "table6_pathx",
               {"path64-blocksparse-aug": {"test/acc": 0.712, "best_val/acc": 0.72, "global_step": 62500},
                "path64-blocksparse-aug-s1": {"best_val/acc": 0.52, "global_step": 20000}},
               {"path64-blocksparse-aug": "step,val/acc\n624,0.5\n1249,0.66\n",
                "path64-blocksparse-aug-s1": "step,val/acc,val/loss,train/acc\n500,,,0.5\n624,0.5,0.693,\n"
                                              "700,,,0.6\n900,,,0.62\n1249,0.52,0.72,\n"})
    path = tmp_path / "reports/table6_pathx/gpu/results.json"
    data = json.loads(path.read_text())
    data["runs"]["path64-blocksparse-aug-s1"]["status"] = "paused"
    path.write_text(json.dumps(data))
    line = results.path64_long()[1]
    assert ("path64-blocksparse-long not run; path64-blocksparse-aug (62,500 steps): test 71.2%, best "
            "validation 72.0%, 65% reached at step 1,249; path64-blocksparse-aug-s1 (paused, 20,000 "
            "steps): best validation 52.0%") in line
    data["runs"]["path64-blocksparse-aug-s1"]["status"] = "stalled"
    path.write_text(json.dumps(data))
    line = results.path64_long()[1]
    assert ("path64-blocksparse-aug-s1 (stalled, no gradient below the classifier head, 20,000 "
            "steps): best validation 52.0%, 65% not reached; training accuracy 61.0% over steps 625-1,249 against validation "
            "52.0% at step 1,249, validation loss 0.693 at step 624 and 0.720 at step 1,249; "
            "path64-blocksparse-tanh not run; path64-blocksparse-tanh-s1 not run.") in line
