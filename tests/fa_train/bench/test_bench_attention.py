"""Attention benchmark harness on CPU: argument validation, rows, OOM / unsupported handling."""
import json

import pytest
import torch

from fa_train.bench import AttentionBenchConfig, run_attention_bench, write_attention_reports
from fa_train.bench import attention, runner
from fa_train.bench.attention import shape_for
from fa_train.bench.floors import H100_SXM, attention_floor
from fa_train.bench.cli import main
from fa_train.bench.common import Unsupported
from fa_train.bench.impls import AttentionImpl, Built, default_impls, padding_lengths

TINY = dict(seqlens=[32, 64], head_dims=[8], causal=[0, 1], tokens=128, hidden=16, dtype="fp32",
            device="cpu", warmup_ms=0, rep_ms=1, progress=False)


class FakeImpl(AttentionImpl):
    """Standard attention with a planted failure: at build, in forward, in backward, or wrong."""

    def __init__(self, name, fail=None):
        self.name, self.fail = name, fail
        self.calls = 0

    def check_support(self, case):
        if self.fail == "unsupported":
            raise Unsupported("fake cannot run this")

    def build(self, case, q, k, v, dropout_p):
        inner = default_impls()["standard"].build(case, q, k, v, dropout_p)
        fail = self.fail

        class Boom(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                raise torch.OutOfMemoryError("CUDA out of memory (fake, backward)")

        def fn():
            self.calls += 1
            if fail == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64 GiB (fake)")
            if fail == "error":
                raise RuntimeError("fake kernel crashed")
            out = inner.fn()
            if fail == "wrong":
                return out * 0.5
            if fail == "oom_bwd":
                return Boom.apply(out)
            return out
        return Built(fn, inner.leaves, inner.to_bnhd)


def _by(rows, **want):
    return [r for r in rows if all(r[k] == v for k, v in want.items())]


def test_standard_and_sdpa_rows_on_cpu():
    rows = run_attention_bench(dict(TINY, impls=["standard", "sdpa_flash"]))
    assert len(rows) == 2 * 2 * 2 * 3  # impls x seqlens x causal x passes
    for r in rows:
        assert r["status"] == "ok", r
        assert r["ms"] > 0 and r["ms_p20"] <= r["ms_p80"]
        assert r["host_ms"] is None  # on the CPU every call is host time
        assert r["tflops"] == pytest.approx(r["flops"] / (r["ms"] * 1e-3) / 1e12)
        assert (r["batch"], r["heads"]) == (128 // r["seqlen"], 2)
    # the guard runs on the first seqlen of each group and passes in fp32
    checked = _by(rows, seqlen=32)
    assert all(r["check_passed"] and r["check_rel_err"] < 1e-4 for r in checked)
    assert all(r["check_rel_err"] is None for r in _by(rows, seqlen=64))
    fwd = _by(rows, impl="standard", seqlen=64, causal=0, **{"pass": "fwd"})[0]
    assert fwd["flops"] == 4 * 2 * 2 * 64 * 64 * 8
    assert _by(rows, impl="standard", seqlen=64, causal=1, **{"pass": "fwd+bwd"})[0]["flops"] == \
        3.5 * fwd["flops"] / 2


def test_failures_become_rows_and_the_run_goes_on():
    impls = {"oom": FakeImpl("oom", "oom"), "oom_bwd": FakeImpl("oom_bwd", "oom_bwd"),
             "unsup": FakeImpl("unsup", "unsupported"), "err": FakeImpl("err", "error"),
             "wrong": FakeImpl("wrong", "wrong"), "good": FakeImpl("good")}
    cfg = dict(TINY, impls=list(impls), seqlens=[32], causal=[0])
    rows = run_attention_bench(cfg, impls=impls)
    status = {(r["impl"], r["pass"]): r["status"] for r in rows}
    for p in ("fwd", "bwd", "fwd+bwd"):
        assert status[("oom", p)] == "OOM"
        assert status[("unsup", p)] == "unsupported"
        assert status[("err", p)] == "error"
        assert status[("wrong", p)] == "incorrect"
        assert status[("good", p)] == "ok"
    assert status[("oom_bwd", "fwd")] == "ok"
    assert status[("oom_bwd", "bwd")] == status[("oom_bwd", "fwd+bwd")] == "OOM"
    assert _by(rows, impl="unsup")[0]["reason"] == "fake cannot run this"
    assert "fake kernel crashed" in _by(rows, impl="err")[0]["reason"]
    wrong = _by(rows, impl="wrong")[0]
    assert wrong["check_passed"] is False and wrong["ms"] is None and "not timed" in wrong["reason"]
    assert impls["wrong"].calls == 1  # checked once, never timed


def test_padding_and_dropout_variant(tmp_path):
    cfg = AttentionBenchConfig(**dict(TINY, impls=["standard", "sdpa_flash", "flex"], seqlens=[64],
                                      padding=True, dropout_p=0.1))
    rows = run_attention_bench(cfg)
    std = _by(rows, impl="standard")
    assert all(r["status"] == "ok" and r["padding"] == 1 and r["dropout_p"] == 0.1 for r in std)
    assert std[0]["check_passed"] and std[0]["check_note"] == "checked with dropout off"
    assert all(r["status"] == "unsupported" for r in _by(rows, impl="sdpa_flash"))
    flex = _by(rows, impl="flex")
    assert all(r["status"] == "unsupported" and "dropout" in r["reason"] for r in flex)
    paths = write_attention_reports(rows, tmp_path, cfg)
    data = json.loads(paths["json"].read_text())
    assert data["config"]["padding"] is True and data["environment"]["device"] == "cpu"
    assert len(data["rows"]) == len(rows)
    md = paths["md"].read_text()
    assert "| head_dim | causal | seqlen | pass | standard | sdpa_flash | flex |" in md
    assert "unsupported" in md and "Not measured" in md
    lengths = padding_lengths(4, 64, seed=0)
    assert ((lengths >= 32) & (lengths <= 64)).all()


def test_shapes_follow_the_token_budget():
    assert shape_for(16384, 2048, 1024, 64) == (16, 32)
    assert shape_for(16384, 2048, 65536, 128) == (1, 16)


def test_cli_cpu_run_writes_files(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["attention", "--out", str(out), "--device", "cpu", "--dtype", "fp32",
                 "--impls", "standard", "--seqlens", "32", "--head-dims", "8", "--causal", "1",
                 "--tokens", "64", "--hidden", "16", "--passes", "fwd,fwd+bwd", "--rep-ms", "1",
                 "--warmup-ms", "0", "--no-progress"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"attention.json", "attention.md", "attention_runtime_fwd.png",
            "attention_runtime_fwd_bwd.png"} <= names
    assert (out / "attention_runtime_fwd.png").read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in capsys.readouterr().out
    assert "Timer: time.perf_counter" in (out / "attention.md").read_text()


def test_timer_is_checked_by_name():
    with pytest.raises(ValueError, match="timer must be one of events, cuda-graph, got 'wall'"):
        AttentionBenchConfig(device="cpu", timer="wall").validate()
    with pytest.raises(ValueError, match="passes: 'bwd' cannot be timed with timer cuda-graph"):
        AttentionBenchConfig(device="cpu", timer="cuda-graph", passes=["fwd", "bwd"]).validate()


@pytest.mark.parametrize("argv,words", [
    (["--seqlens", "12a"], "--seqlens: '12a' is not a valid int"),
    (["--impls", "flash,nope"], "impls: 'nope' is not one of"),
    (["--passes", "fwd,back"], "passes: 'back' is not one of"),
    (["--hidden", "100", "--head-dims", "64"], "hidden 100 is not divisible by head dim 64"),
    (["--causal", "2"], "causal: 2 is not one of"),
    (["--dropout", "1.5"], "dropout_p must be in [0, 1)"),
    (["--seqlens", "0"], "seqlens: 0 is not a positive integer"),
    (["--timer", "wall"], "argument --timer: invalid choice: 'wall'"),
    (["--repeats", "0"], "attention: repeats=0 is invalid: expected an integer >= 1\n"),
    (["--repeats", "-3"], "attention: repeats=-3 is invalid: expected an integer >= 1\n"),
])
def test_cli_argument_errors(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["attention", "--out", str(tmp_path), "--device", "cpu", *argv])
    assert info.value.code == 2
    assert words in capsys.readouterr().err


class Logged(FakeImpl):
    """FakeImpl whose calls append its name to a shared log."""

    def __init__(self, name, log, fail=None):
        super().__init__(name, fail)
        self.log = log

    def build(self, case, q, k, v, dropout_p):
        built = super().build(case, q, k, v, dropout_p)

        def fn():
            self.log.append(self.name)
            return built.fn()
        return Built(fn, built.leaves, built.to_bnhd)


def scripted_timer(log, times, seen):
    """A bench_time stand-in: one call of fn, then the next scripted ms of the impl it called;
    `seen` records (impl, timer) per timing."""
    def bench_time(fn, device, warmup_ms=25, rep_ms=100, grad_to_none=None, timer="events"):
        fn()
        seen.append((log[-1], timer))
        ms = times[log[-1]].pop(0)
        return {"ms": ms, "ms_p20": ms - 0.5, "ms_p80": ms + 0.5}
    return bench_time


@pytest.mark.parametrize("timer", ["events", "cuda-graph"])
def test_repeats_alternate_impls_and_report_the_median(monkeypatch, timer):
    log, seen = [], []
    times = {"a": [3.0, 1.0, 2.0], "b": [5.0, 9.0, 4.0], "c": [7.0, 7.5, 6.0]}
    monkeypatch.setattr(runner, "bench_time", scripted_timer(log, times, seen))
    impls = {n: Logged(n, log) for n in times} | {"err": Logged("err", log, "error")}
    rows = run_attention_bench(dict(TINY, impls=list(impls), seqlens=[32], causal=[0],
                                    passes=["fwd"], repeats=3, timer=timer), impls=impls)
    assert seen == [(n, timer) for n in ["a", "b", "c"] * 3]
    assert impls["err"].calls == 1  # failed in the first repeat, not run again
    a, b, c, err = (_by(rows, impl=n)[0] for n in ("a", "b", "c", "err"))
    assert (a["ms"], a["ms_min"], a["ms_max"], a["ms_repeats"]) == (2.0, 1.0, 3.0, [3.0, 1.0, 2.0])
    assert (a["ms_p20"], a["ms_p80"], a["repeats"]) == (1.5, 2.5, 3)
    assert (b["ms"], b["ms_min"], b["ms_max"], c["ms"]) == (5.0, 4.0, 9.0, 7.0)
    assert a["tflops"] == a["flops"] / 2e-3 / 1e12
    assert err["status"] == "error" and err["repeats"] == 0 and err["ms"] is None


def test_one_repeat_keeps_the_single_timing(monkeypatch):
    log, seen = [], []
    monkeypatch.setattr(runner, "bench_time", scripted_timer(log, {"a": [3.0]}, seen))
    row, = run_attention_bench(dict(TINY, impls=["a"], seqlens=[32], causal=[0], passes=["fwd"]),
                               impls={"a": Logged("a", log)})
    assert (row["ms"], row["ms_p20"], row["ms_p80"], row["ms_min"], row["ms_max"],
            row["repeats"]) == (3.0, 2.5, 3.5, 3.0, 3.0, 1)


@pytest.mark.parametrize("gpu,dtype,floored", [("NVIDIA H100 80GB HBM3", "bf16", True),
                                               ("NVIDIA A100-SXM4-80GB", "bf16", False),
                                               ("NVIDIA H100 80GB HBM3", "fp32", False)])
def test_rows_carry_the_floor_on_known_gpus_only(monkeypatch, tmp_path, gpu, dtype, floored):
    log, seen = [], []
    monkeypatch.setattr(runner, "bench_time",
                        scripted_timer(log, {"a": [4.0, 8.0, 2.0, 6.0, 3.0, 5.0]}, seen))
    monkeypatch.setattr(attention, "gpu_name", lambda device: gpu)
    cfg = AttentionBenchConfig(**dict(TINY, impls=["a"], seqlens=[32], causal=[1], dtype=dtype,
                                      repeats=2, check=False))
    rows = run_attention_bench(cfg, impls={"a": Logged("a", log)})
    assert len(rows) == 3
    for r in rows:
        floor = attention_floor(r["batch"], r["heads"], 32, 8, True, "bf16", r["pass"], H100_SXM)
        if floored:
            assert {k: r[k] for k in floor} == floor
            assert r["roofline_fraction"] == floor["floor_ms"] / r["ms"]
        else:
            assert not {"floor_bytes", "floor_ms", "floor_bound", "roofline_fraction"} & set(r)
    md = write_attention_reports(rows, tmp_path, cfg)["md"].read_text()
    assert ("Share of the floor" in md) == floored
    assert "fastest repeat's median" in md and "each cell measured 2 times" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cli_cuda_missing_is_a_clear_error(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["attention", "--out", str(tmp_path)])
    assert "CUDA is not available; pass --device cpu" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_attention_smoke(tmp_path):
    cfg = dict(impls=["flash", "standard", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex"],
               seqlens=[128, 256], head_dims=[64], causal=[0, 1], tokens=1024, hidden=256,
               device="cuda", warmup_ms=1, rep_ms=5, progress=False)
    rows = run_attention_bench(cfg)
    for r in rows:
        assert r["status"] in ("ok", "unsupported"), r
        if r["impl"] in ("standard", "sdpa_flash"):
            assert r["status"] == "ok" and r["peak_mem_bytes"] > 0 and r["host_ms"] > 0
    write_attention_reports(rows, tmp_path, AttentionBenchConfig(**cfg))
    assert (tmp_path / "attention_memory.png").exists()


@pytest.mark.gpu
def test_gpu_attention_cuda_graph_timer(tmp_path):
    cfg = dict(impls=["flash", "standard", "sdpa_flash"], seqlens=[256], head_dims=[64],
               causal=[1], tokens=2048, hidden=256, passes=["fwd", "fwd+bwd"],
               device="cuda", warmup_ms=1, rep_ms=5, progress=False, timer="cuda-graph")
    rows = run_attention_bench(cfg)
    assert len(rows) == 6 and all(r["status"] == "ok" and r["ms"] > 0 for r in rows), rows
    write_attention_reports(rows, tmp_path, AttentionBenchConfig(**cfg))
    assert "replayed from one CUDA graph" in (tmp_path / "attention.md").read_text()


def test_flash_impl_with_padding_runs_the_kernel_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = AttentionBenchConfig(**dict(TINY, impls=["flash", "flash_deterministic"], seqlens=[32],
                                      causal=[1], passes=["fwd+bwd"], padding=True))
    rows = run_attention_bench(cfg)
    assert {r["impl"] for r in rows} == {"flash", "flash_deterministic"}
    assert all(r["status"] == "ok" and r["check_passed"] for r in rows), rows
