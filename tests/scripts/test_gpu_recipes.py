"""scripts/gpu_recipes.sh: runs recipes within a time budget and packs the named runs' results."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_runs_a_recipe_subset_then_resumes_and_packs(tmp_path):
    env = dict(os.environ, SCALE="smoke", PYTHON=sys.executable, PYTHONPATH=str(REPO))
    env.pop("TRITON_INTERPRET", None)

    def run(budget, **flags):
        res = subprocess.run(["bash", str(REPO / "scripts/gpu_recipes.sh"), str(tmp_path / "out"),
                              str(budget), "table2_gpt2:small-standard"],
                             cwd=tmp_path, env=env | flags, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout

    # a training run of another recipe on the same host (another invocation's) is left alone
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "fa_train.train",
                              "hydra.run.dir=reports/table4_gpt2_context/smoke/flash-4k"])
    try:
        assert "[1/1] small-standard: ok" in run(240)
        assert other.poll() is None
    finally:
        other.kill()
    with tarfile.open(tmp_path / "out/reports.tar.gz") as tar:
        names = set(tar.getnames())
        results = json.load(tar.extractfile("reports/table2_gpt2/smoke/results.json"))
    assert "reports/table2_gpt2/smoke/report.md" in names
    assert not any(name.endswith(".ckpt") for name in names)
    assert results["runs"]["small-standard"]["status"] == "ok"
    assert "small-standard: ok (done before, skipped)" in run(240)
    assert "budget spent: table2_gpt2 not started" in run(10)
    assert results["runs"]["small-standard"]["executor"] == "SubprocessExecutor"
    assert "[1/1] small-standard: ok" in run(240, FORCE="1", IN_PROCESS="1")
    with tarfile.open(tmp_path / "out/reports.tar.gz") as tar:
        results = json.load(tar.extractfile("reports/table2_gpt2/smoke/results.json"))
    assert results["runs"]["small-standard"]["executor"] == "InProcessExecutor"


@pytest.mark.timeout(400)
def test_paused_runs_travel_with_their_small_checkpoints(tmp_path):
    env = dict(os.environ, SCALE="smoke", PYTHON=sys.executable, PYTHONPATH=str(REPO),
               PAUSE_AFTER="0.0001")
    env.pop("TRITON_INTERPRET", None)

    def packed(**flags):
        res = subprocess.run(["bash", str(REPO / "scripts/gpu_recipes.sh"), str(tmp_path / "out"),
                              "240", "table2_gpt2:small-standard"],
                             cwd=tmp_path, env=env | flags, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        with tarfile.open(tmp_path / "out/reports.tar.gz") as tar:
            return res.stdout, set(tar.getnames())

    other = tmp_path / "reports/table2_gpt2/smoke/small-flash/checkpoints/last.ckpt"  # a run not named
    other.parent.mkdir(parents=True)
    other.write_bytes(b"weights")
    said, names = packed(PACK_MB="0")
    assert "small-standard: paused" in said
    assert "| run | step | of |" in said and "\n| small-standard | " in said   # what is left
    assert "reports/table2_gpt2/smoke/small-standard/checkpoints/last.ckpt" in names
    assert "reports/table2_gpt2/smoke/results.json" in names
    assert not any("small-flash" in name for name in names)
    assert "MiB, over PACK_MB=0: name fewer runs or lower CKPT_MB" in said
    said, names = packed(CKPT_MB="0")
    assert "small-standard: continuing from its checkpoint" in said
    assert "over PACK_MB" not in said
    assert not any(name.endswith(".ckpt") for name in names)


@pytest.mark.timeout(400)
def test_work_folder_keeps_checkpoints_that_do_not_travel(tmp_path):
    env = dict(os.environ, SCALE="smoke", PYTHON=sys.executable, PYTHONPATH=str(REPO),
               PAUSE_AFTER="0.0001", WORK=str(tmp_path / "build/work"), CKPT_MB="0")
    env.pop("TRITON_INTERPRET", None)
    seeded = tmp_path / "reports/table2_gpt2/smoke/small-flash/metrics.csv"   # an earlier run's files
    seeded.parent.mkdir(parents=True)
    seeded.write_text("step\n")

    def packed():
        res = subprocess.run(["bash", str(REPO / "scripts/gpu_recipes.sh"), str(tmp_path / "out"),
                              "240", "table2_gpt2:small-standard"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        with tarfile.open(tmp_path / "out/reports.tar.gz") as tar:
            return res.stdout, set(tar.getnames())

    said, names = packed()
    assert "small-standard: paused" in said
    assert (tmp_path / "build/work/table2_gpt2/smoke/small-flash/metrics.csv").is_file()
    assert (tmp_path / "build/work/table2_gpt2/smoke/small-standard/checkpoints/last.ckpt").is_file()
    assert not (tmp_path / "reports/table2_gpt2/smoke/small-standard").exists()
    assert "reports/table2_gpt2/smoke/results.json" in names
    assert "reports/table2_gpt2/smoke/small-standard/metrics.csv" in names
    assert not any(name.endswith(".ckpt") or not name.startswith("reports/") for name in names)
    said, _ = packed()
    assert "small-standard: continuing from its checkpoint" in said
