"""IO benchmark pieces on CPU: ncu CSV parsing, FLOP conventions, rows without ncu, reports."""
import shutil
import types

import pytest
import torch

from fa_train.bench import IOBenchConfig, io_worker, run_io_bench, write_io_reports, write_reports
from fa_train.bench.io import executed_flops, hbm_bytes
from fa_train.bench.ncu import NcuError, parse_ncu_csv, profile_worker
from fa_train.bench.report import Plot, Table, pivot_markdown

NCU_SAMPLE = '''==PROF== Connected to process 4242 (/usr/bin/python3)
==PROF== Profiling "attn_fwd" - 0: 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","attn_fwd","1","7","(128, 1, 1)","(8, 1024, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"
"0","4242","python3","127.0.0.1","attn_fwd","1","7","(128, 1, 1)","(8, 1024, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Kbyte","512"
"1","4242","python3","127.0.0.1","attn_bwd","1","7","(128, 1, 1)","(8, 1024, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","2.5"
"1","4242","python3","127.0.0.1","attn_bwd","1","7","(128, 1, 1)","(8, 1024, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","100"
==PROF== Disconnected from process 4242
'''


def test_parse_ncu_csv_sums_kernels_and_units():
    res = parse_ncu_csv(NCU_SAMPLE)
    assert res["kernels"] == 2
    assert res["dram__bytes_read.sum"] == 1048576 + 2.5e6
    assert res["dram__bytes_write.sum"] == 512e3 + 100


def test_parse_ncu_csv_errors():
    with pytest.raises(NcuError, match="no CSV table"):
        parse_ncu_csv("==PROF== No kernels were profiled.\n")
    bad = NCU_SAMPLE.replace('"Kbyte","512"', '"furlong","512"')
    with pytest.raises(NcuError, match="unknown unit 'furlong'"):
        parse_ncu_csv(bad)


def test_missing_ncu_is_a_clear_message():
    with pytest.raises(NcuError, match="ncu unavailable"):
        profile_worker(["--impl", "flash"], ncu="ncu-that-does-not-exist")
    cfg = types.SimpleNamespace(ncu="ncu-that-does-not-exist", device="cuda", batch=1, seqlen=8,
                                heads=1, head_dim=8, causal=False, dtype="bf16")
    res = hbm_bytes(cfg, "flash", "fwd+bwd")
    assert res["hbm_gb"] is None and res["hbm_note"].startswith("ncu unavailable")
    fake = hbm_bytes(cfg, "flash", "fwd", profiler=lambda args, ncu: {
        "kernels": 3, "dram__bytes_read.sum": 3e9, "dram__bytes_write.sum": 1e9})
    assert fake["hbm_gb"] == 4.0 and fake["ncu_kernels"] == 3 and fake["hbm_note"] is None


def test_worker_attention_mode_takes_the_io_arguments():
    cfg = types.SimpleNamespace(ncu="ncu", device="cuda", batch=2, seqlen=24, heads=2,
                                head_dim=8, causal=True, dtype="fp32")
    calls = []
    hbm_bytes(cfg, "standard", "fwd+bwd", profiler=lambda args, ncu: calls.append(args) or {})
    args = io_worker.build_parser().parse_args(calls[0])
    assert (args.mode, args.impl, args.batch, args.seqlen, args.heads, args.head_dim, args.causal,
            args.dtype, args.pass_name) == ("attention", "standard", 2, 24, 2, 8, 1, "fp32",
                                            "fwd+bwd")
    io_worker.build_call(args, torch.device("cpu"))()  # forward + backward on the CPU


def test_flop_conventions():
    b, n, h, d = 64, 1024, 16, 64
    unit = b * h * n * n * d
    assert executed_flops("standard", b, n, h, d, False, "fwd+bwd") == 14 * unit
    assert executed_flops("flash", b, n, h, d, False, "fwd+bwd") == 16 * unit
    assert executed_flops("flash", b, n, h, d, False, "fwd") == 4 * unit
    assert executed_flops("flash", b, n, h, d, True, "bwd") == 6 * unit


def test_io_bench_on_cpu(tmp_path):
    cfg = IOBenchConfig(impls=["standard"], batch=2, seqlen=32, heads=2, head_dim=8, dtype="fp32",
                        device="cpu", warmup_ms=0, rep_ms=1, progress=False,
                        passes=["fwd", "fwd+bwd"])
    rows = run_io_bench(cfg)
    assert [r["pass"] for r in rows] == ["fwd", "fwd+bwd"]
    for r in rows:
        assert r["status"] == "ok" and r["gflops"] == r["gflops_executed"] > 0
        assert r["hbm_gb"] is None and r["hbm_note"] == "ncu needs a CUDA device"
    paths = write_io_reports(rows, tmp_path, cfg)
    md = paths["md"].read_text()
    assert "GFLOPs executed" in md and "ncu needs a CUDA device" in md
    assert (tmp_path / "io.png").read_bytes()[:4] == b"\x89PNG"


def test_write_reports_tables_and_plots(tmp_path):
    rows = [{"impl": i, "seqlen": n, "head_dim": 64, "causal": 0, "pass": "fwd", "status": "ok",
             "ms": n / s, "tflops": s} for i, s in (("a", 1.0), ("b", 2.0)) for n in (128, 256)]
    rows.append({"impl": "c", "seqlen": 128, "head_dim": 64, "causal": 0, "pass": "fwd",
                 "status": "OOM", "reason": "CUDA out of memory", "ms": None, "tflops": None})
    table = Table("TFLOP/s", ("head_dim", "seqlen"), "impl", "tflops", ".2f")
    text = pivot_markdown(rows, table)
    assert "| head_dim | seqlen | a | b | c |" in text
    assert "| 64 | 128 | 1.00 | 2.00 | OOM |" in text
    assert "| 64 | 256 | 1.00 | 2.00 |  |" in text
    plot = Plot("rt.png", "seqlen", "ms", ("impl",), ("head_dim",), {"pass": "fwd"})
    empty = Plot("none.png", "seqlen", "ms", ("impl",), (), {"pass": "bwd"})
    paths = write_reports(rows, tmp_path / "new", "demo", {"device": "cpu", "date": "today"},
                          {"x": 1}, [table], [plot, empty], ["a note"])
    assert set(paths) == {"json", "md", "rt.png"}
    md = paths["md"].read_text()
    assert "a note" in md and "![rt](rt.png)" in md and "- c OOM (1 rows): CUDA out of memory" in md


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute")
def test_gpu_io_with_ncu(tmp_path):
    rows = run_io_bench(IOBenchConfig(impls=["standard"], batch=2, seqlen=256, heads=2,
                                      head_dim=64, device="cuda", warmup_ms=1, rep_ms=5,
                                      progress=False))
    assert rows[0]["status"] == "ok" and rows[0]["hbm_gb"] > 0, rows[0]
    assert torch.cuda.is_available()
