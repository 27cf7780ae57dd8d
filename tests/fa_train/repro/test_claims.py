"""The claims table: derive kinds on synthetic bench records, verdicts, recipe checks, and the
Figure 3 report rendered from the committed H100 result files."""
import json
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from fa_train.repro.claims import (Finding, claims_table, crossover, fastest, finding, oom,
                                   record_label, render_claims, verdict)
from fa_train.repro.recipe import load_recipe, validate_recipe
from fa_train.repro.report import Ours, render_report

ROOT = Path(__file__).resolve().parents[3]

RECIPE = textwrap.dedent("""
    name: claimy
    title: "Claimy — claims for tests"
    description: three bench runs
    runs:
      - {name: dense, kind: bench, subcommand: attention}
      - {name: approx, kind: bench, subcommand: attention}
      - {name: sparse, kind: bench, subcommand: blocksparse}
    scales:
      smoke: {hardware: "CPU", measures: "wiring"}
      gpu: {hardware: "one GPU", measures: "speed"}
      full: {hardware: "one A100", measures: "the paper's"}
    metrics:
      ms: {keys: [ms], unit: ms, where: {pass: fwd+bwd}}
    paper:
      source: "a test"
      label: "paper's numbers"
      hardware: "one A100"
      claims: ["Flash is 3x faster.", "Approx overtakes flash at 1K.", "Sparse is fastest.",
               "All but lin OOM.", "Unchecked claim."]
      tables:
        t: {caption: "T", unit: "×", columns: [speedup], units: {speedup: "×"}, rows: {Flash: [3]}}
    report:
      tables:
        - paper_table: t
          rows: {Flash: dense}
          columns:
            speedup: {derive: record_ratio, run: dense, metric: ms, num: {impl: standard},
                      den: {impl: flash}, join: [seqlen], agg: max}
      claims:
        title: "Claims"
        note: "a note"
        rows:
          1: {ours: {table: t, row: Flash, column: speedup}, expect: {at_least: 3}}
          2:
            ours: {derive: crossover, metric: ms, x: seqlen, per: batch,
                   subject: {run: dense, where: {impl: flash}}, rivals: [{run: approx, label: impl}]}
            expect: {between: [512, 1024]}
          3:
            ours: {derive: fastest, metric: ms, x: seqlen, per: batch, pick: {max: density},
                   subject: {run: sparse, where: {impl: blocksparse}, label: layout},
                   rivals: [{run: dense, label: impl}, {run: approx, label: impl}]}
            expect: {equals: true}
          4:
            ours: {derive: oom, metric: ms, x: seqlen, at: 4096,
                   sides: [{run: dense, where: {impl: standard}, label: impl}, {run: approx, label: impl}]}
            expect: {equals: [lin]}
""")


def row(impl, n, ms, batch=1, status="ok", **extra):
    return {"impl": impl, "seqlen": n, "pass": "fwd+bwd", "batch": batch, "status": status,
            "ms": ms if status == "ok" else None, **extra}


def bench(rows):
    return {"status": "ok", "kind": "bench", "metrics": {"attention": {"rows": rows}}}


def dense_rows():
    return [row("flash", 512, 1.0), row("flash", 1024, 2.0), row("flash", 4096, 8.0),
            row("standard", 512, 4.0), row("standard", 1024, 8.0),
            row("standard", 4096, None, status="OOM"),
            row("flash", 512, 0.5, **{"pass": "fwd"})]          # another pass: ignored


def approx_rows():
    return [row("lin", 512, 3.0), row("lin", 1024, 1.9), row("lin", 4096, 2.0),
            row("perf", 512, 5.0), row("perf", 1024, 1.5), row("perf", 2048, None, status="OOM")]


def sparse_rows():                  # batch 4: four sequences per call
    return [row("blocksparse", 1024, 1.0, batch=4, layout="k=1", density=0.1),
            row("blocksparse", 1024, 4.0, batch=4, layout="k=2", density=0.2),
            row("blocksparse", 4096, 2.0, batch=4, layout="k=1", density=0.05),
            row("blocksparse", 4096, 4.0, batch=4, layout="k=2", density=0.1)]


@pytest.fixture
def recipe(make_recipe):
    return make_recipe("claimy", RECIPE)


def make_ours(recipe, tmp_path, runs):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps({"runs": runs}))
    return Ours(recipe, out)


def spec(recipe, claim):
    return recipe.report["claims"]["rows"][claim]["ours"]


def all_runs():
    return {"dense": bench(dense_rows()), "approx": bench(approx_rows()), "sparse": bench(sparse_rows())}


def test_crossover_finds_first_faster_rivals_fastest_first(recipe, tmp_path):
    found = crossover(make_ours(recipe, tmp_path, all_runs()), spec(recipe, 2))
    assert (found.text, found.value) == ("1024 (perf, lin)", 1024)
    assert verdict(found, {"between": [512, 1024]}) == "holds"
    assert verdict(found, {"between": [256, 512]}) == "does not hold"


def test_crossover_never_reached_does_not_hold(recipe, tmp_path):
    runs = all_runs()
    runs["approx"] = bench([row("lin", n, 100.0) for n in (512, 1024, 4096)])
    found = crossover(make_ours(recipe, tmp_path, runs), spec(recipe, 2))
    assert found.text == "none up to 4096" and found.value is None and found.measured
    assert verdict(found, {"between": [512, 1024]}) == "does not hold"


def test_crossover_divides_by_per_field(recipe, tmp_path):
    runs = all_runs()
    runs["approx"] = bench([row("lin", 512, 1.5, batch=2)])      # 0.75 ms per sequence < 1.0
    assert crossover(make_ours(recipe, tmp_path, runs), spec(recipe, 2)).text == "512 (lin)"
    no_per = {k: v for k, v in spec(recipe, 2).items() if k != "per"}
    assert crossover(make_ours(recipe, tmp_path, runs), no_per).text == "none up to 512"


def test_fastest_picks_densest_and_holds(recipe, tmp_path):
    found = fastest(make_ours(recipe, tmp_path, all_runs()), spec(recipe, 3))
    # 1024: k=2 at 1.0 ms per sequence vs perf 1.5; 4096: k=2 at 1.0 vs lin 2.0
    assert found.text == ("k=2 (largest density): faster at every seqlen; the fastest other's "
                          "time over it: 1024 1.50× (perf), 4096 2.00× (lin)")
    assert found.value is True and verdict(found, {"equals": True}) == "holds"
    unpicked = {k: v for k, v in spec(recipe, 3).items() if k != "pick"}   # its fastest: k=1
    assert fastest(make_ours(recipe, tmp_path, all_runs()), unpicked).text == (
        "k=1: faster at every seqlen; the fastest other's time over it: 1024 6.00× (perf), "
        "4096 4.00× (lin)")


def test_fastest_marks_overlapping_spreads(recipe, tmp_path):
    runs = all_runs()
    for r in runs["sparse"]["metrics"]["attention"]["rows"]:      # per sequence: value ± 0.25
        r.update(ms_p20=r["ms"] - 1.0, ms_p80=r["ms"] + 1.0)
    for r in runs["approx"]["metrics"]["attention"]["rows"]:
        if r["ms"] is not None:
            r.update(ms_p20=r["ms"] - 0.2, ms_p80=r["ms"] + 0.2)
    spread = {**spec(recipe, 3), "spread": ["ms_p20", "ms_p80"]}
    found = fastest(make_ours(recipe, tmp_path, runs), spread)
    # 1024: k=2 in [0.75, 1.25] vs perf in [1.3, 1.7]; 4096: [0.75, 1.25] vs lin [1.8, 2.2]
    assert "1024 1.50× (perf), 4096 2.00× (lin)" in found.text
    runs["approx"]["metrics"]["attention"]["rows"][4].update(ms_p20=1.2)          # perf at 1024
    found = fastest(make_ours(recipe, tmp_path, runs), spread)
    assert "1024 1.50× (perf, spreads overlap), 4096 2.00× (lin)" in found.text
    assert found.value is True                          # the verdict is on the medians


def test_fastest_says_where_it_is_slower(recipe, tmp_path):
    runs = all_runs()
    runs["dense"] = bench(dense_rows() + [row("standard", 1024, 0.5)])
    found = fastest(make_ours(recipe, tmp_path, runs), spec(recipe, 3))
    assert "slower at 1024;" in found.text and "1024 0.50× (standard)" in found.text
    assert found.value is False and verdict(found, {"equals": True}) == "does not hold"


def test_oom_first_oom_and_survivors(recipe, tmp_path):
    found = oom(make_ours(recipe, tmp_path, all_runs()), spec(recipe, 4))
    assert found.text == "OOM: standard from 4096; perf from 2048; ran at 4096: lin"
    assert verdict(found, {"equals": ["lin"]}) == "holds"
    runs = all_runs()
    runs["dense"] = bench(dense_rows()[:5])                      # standard never OOMs ...
    runs["dense"]["metrics"]["attention"]["rows"].append(row("standard", 4096, 30.0))
    found = oom(make_ours(recipe, tmp_path, runs), spec(recipe, 4))
    assert found.text == "OOM: perf from 2048; ran at 4096: standard, lin"
    assert verdict(found, {"equals": ["lin"]}) == "does not hold"


def test_missing_run_has_no_verdict(recipe, tmp_path):
    runs = all_runs()
    del runs["approx"]
    ours = make_ours(recipe, tmp_path, runs)
    for claim in (2, 3, 4):
        found = finding(ours, spec(recipe, claim))
        assert found == Finding("approx: not run yet", measured=False)
        assert verdict(found, {"equals": True}) == "–"
    runs["dense"]["status"] = "oom"
    assert finding(make_ours(recipe, tmp_path, runs), spec(recipe, 4)).text == "dense: oom"
    assert finding(make_ours(recipe, tmp_path, {}), spec(recipe, 2)) == Finding("not run yet",
                                                                                measured=False)


def test_verdict_kinds():
    assert verdict(Finding("", 3.0), {"at_least": 3}) == "holds"
    assert verdict(Finding("", 2.9), {"at_least": 3}) == "does not hold"
    assert verdict(Finding("", 2.9), {"at_most": 3}) == "holds"
    assert verdict(Finding("", None), {"at_most": 3}) == "does not hold"
    assert verdict(Finding("", ["b", "a"]), {"equals": ["a", "b"]}) == "holds"
    assert verdict(Finding("", 1.0), None) == "–"


def test_record_label_shortens_descriptions():
    rec = {"layout": "block_size=64,layout=bigbird,random_blocks=3", "impl": "blocksparse"}
    assert record_label(rec, "layout", "run") == "bigbird"
    assert record_label({"layout": "k=4"}, "layout", "run") == "k=4"
    assert record_label(rec, None, "run") == "run"


def test_claims_table_rows_and_verdicts(recipe, tmp_path):
    lines = render_claims(make_ours(recipe, tmp_path, all_runs()), "gpu")
    assert lines[:4] == ["## Claims", "", "| # | the paper (one A100) | ours (gpu) | verdict |",
                         "|---|---|---|---|"]
    assert "| 1 | Flash is 3x faster. | 4× | holds |" in lines       # max(4/1, 8/2)
    assert "| 2 | Approx overtakes flash at 1K. | 1024 (perf, lin) | holds |" in lines
    assert "| 5 | Unchecked claim. | not compared | – |" in lines
    assert "_a note_" in lines


def train(ppl, tps=1000.0, status="ok", device="H100"):
    return {"status": status, "kind": "train", "run_dir": "x",
            "metrics": {"val/ppl": ppl, "tokens_per_sec_per_device": tps, "device_name": device}}


def claim(recipe, tmp_path, runs, number):
    found = finding(make_ours(recipe, tmp_path, runs), spec(recipe, number))
    return found.text, verdict(found, recipe.report["claims"]["rows"][number]["expect"])


def test_claim_over_rows_holds_when_they_increase_strictly(ordered, tmp_path):
    assert validate_recipe(ordered) == []
    runs = {"base": train(30.0, 1000.0), "fast": train(25.5, 2500.0)}
    assert claim(ordered, tmp_path, runs, 1) == ("Flash: 25.50 < Baseline: 30.00", "holds")
    assert claim(ordered, tmp_path, runs, 2) == ("Baseline: 1.00× < Flash: 2.50×", "holds")
    runs = {"base": train(30.0, 1000.0), "fast": train(30.0, 999.0)}        # equal: not lower
    assert claim(ordered, tmp_path, runs, 1) == ("Flash: 30.00 ≥ Baseline: 30.00", "does not hold")
    assert claim(ordered, tmp_path, runs, 2) == ("Baseline: 1.00× ≥ Flash: 1.00×", "does not hold")


def test_claim_over_rows_without_every_value_has_no_verdict(ordered, tmp_path):
    runs = {"base": train(30.0), "fast": train(25.5, device="H200")}
    assert claim(ordered, tmp_path, runs, 1) == ("Flash: 25.50 < Baseline: 30.00", "holds")
    assert claim(ordered, tmp_path, runs, 2) == ("Flash: baseline on another GPU", "–")
    runs = {"base": train(30.0), "fast": train(None, status="paused")}
    assert claim(ordered, tmp_path, runs, 1) == ("fast: paused", "–")
    assert claim(ordered, tmp_path, {"fast": train(25.5)}, 2) == ("base: not run yet", "–")
    assert claim(ordered, tmp_path, {}, 1) == ("not run yet", "–")


def test_a_claim_on_a_metric_measured_while_training_reads_paused_runs(ordered, tmp_path):
    """Throughput marked so_far: a paused run's tokens/s judges the speed claim; perplexity (not
    so_far) still waits for the run to finish."""
    runs = {"base": train(30.0, 1000.0, status="paused"), "fast": train(25.5, 2500.0)}
    assert claim(ordered, tmp_path, runs, 2) == ("base: paused", "–")
    ordered.metrics["tps"]["so_far"] = True
    assert claim(ordered, tmp_path, runs, 2) == ("Baseline: 1.00× < Flash: 2.50×", "holds")
    assert claim(ordered, tmp_path, runs, 1) == ("base: paused", "–")
    runs["base"]["status"] = "failed"                      # a failed run's numbers are not read
    assert claim(ordered, tmp_path, runs, 2) == ("base: failed", "–")


def test_claim_on_a_ratio_cell_waits_for_its_baseline_run(ordered, tmp_path):
    """A single cell's claim reads its row's baseline too: not run yet, not the ratio's n/a."""
    cell = {"table": "t", "row": "Flash", "column": "speedup"}
    ours = make_ours(ordered, tmp_path, {"fast": train(25.5)})
    assert finding(ours, cell) == Finding("base: not run yet", measured=False)
    ours = make_ours(ordered, tmp_path, {"fast": train(25.5, 3000.0), "base": train(30.0)})
    assert finding(ours, cell) == Finding("3.00×", 3.0)


@pytest.mark.parametrize("name", ["table1_bert", "table2_gpt2", "table4_gpt2_context"])
def test_language_model_claims_before_their_runs(name, tmp_path):
    """Every claim of the three LM recipes reads "not run yet", without a verdict, until its runs
    have run."""
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    lines = claims_table(Ours(recipe, tmp_path), "gpu")[2:]
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == len(recipe.paper["claims"]) == len(recipe.report["claims"]["rows"])
    assert all(row.endswith("| not run yet | – |") for row in rows)


def test_recipe_checks_claims(recipe):
    assert validate_recipe(recipe) == []
    data = yaml.safe_load(RECIPE)
    rows = data["report"]["claims"]["rows"]
    rows[9] = {"ours": {"table": "t", "row": "Flash", "column": "speedup"}}
    rows[2]["ours"]["derive"] = "median"
    rows[3]["ours"]["rivals"][0]["run"] = "nope"
    del rows[4]["ours"]["at"]
    rows[1]["expect"] = {"roughly": 3}
    rows[5] = {"ours": {"table": "t", "rows": ["Flash", "Flsah"], "column": "speedup"}}
    recipe.data = data
    problems = validate_recipe(recipe)
    assert "report.claims.rows.9: must be a claim number, 1 ... 5 (paper.claims)" in problems
    assert "report.claims.rows.2.ours: needs `table` or a derive in crossover, fastest, oom" in problems
    assert "report.claims.rows.3.ours: unknown run 'nope'" in problems
    assert "report.claims.rows.4.ours: oom needs sides and at" in problems
    assert "report.claims.rows.1.expect: one of at_least, at_most, between, equals" in problems
    assert "report.claims.rows.5.ours: unknown row 'Flsah' of table 't'" in problems
    assert len(problems) == 6


def test_figure3_report_from_committed_results(tmp_path):
    src = ROOT / "reports" / "figure3_attention" / "gpu"
    shutil.copy(src / "results.json", tmp_path / "results.json")
    recipe = load_recipe(ROOT / "recipes" / "figure3_attention.yaml")
    assert validate_recipe(recipe) == []
    text = render_report(recipe, "gpu", tmp_path).read_text()
    section = text[text.index("## Figure 3 — the paper's claims"):text.index("## Plots")]
    assert "| FlashAttention | ours (gpu) | 12.4 | 37.1 |" in text      # the headline table stays
    assert "up to 3x faster than PyTorch attention at N = 128-2K. | 12.4× | holds |" in section
    assert "linear in N. | 37.1× | holds |" in section
    assert ("k=4 (largest density): faster at every seqlen; the fastest other's time over it: "
            "4096 1.02× (bigbird, spreads overlap), 16384 1.09× (bigbird), 65536 1.37× (bigbird) | holds |") in section
    assert ("| OOM: standard from 8192; ran at 65536: sdpa_efficient, sdpa_cudnn, linformer, linear, "
            "performer, reformer, smyrf, longformer, bigbird, fixed, strided | does not hold |") in section
    assert "between 512 and 1K. | 4096 (linear, linformer) | does not hold |" in section
    assert section in (src / "report.md").read_text()                # the committed report is current
