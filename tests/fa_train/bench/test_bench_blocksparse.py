"""Block-sparse and block-size benchmarks on CPU: layouts, flex block masks, rows, reports."""
import json

import pytest
import torch

from fa_train.bench import (BlocksizeBenchConfig, BlocksparseBenchConfig, run_blocksize_bench,
                            run_blocksparse_bench, write_blocksize_reports,
                            write_blocksparse_reports)
from fa_train.bench.blocksize import parse_block
from fa_train.bench.blocksparse import (add_derived, expand_layout, layout_for_density,
                                        layout_specs)
from fa_train.bench.cli import main
from fa_train.bench.impls import flex_block_mask
from kernels import reference_attention
from kernels.layouts import LayoutSpec, butterfly_layout, density


def test_expand_layout():
    layout = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    mask = expand_layout(layout, 2, 3)
    assert mask.tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("target", [0.05, 0.1, 0.2, 0.5, 1.0])
def test_layout_for_density_is_closest(target):
    spec = layout_for_density(4096, 128, target)  # nb = 32
    got = density(spec.build(4096))
    assert spec.block_size == 128 and spec.butterfly_size is None and spec.local_window == 0
    candidates = [density(butterfly_layout(4096, 128, n_factors=kk)) for kk in range(6)]
    candidates += [density(butterfly_layout(4096, 128, global_size=gg)) for gg in range(33)]
    assert abs(got - target) == pytest.approx(min(abs(c - target) for c in candidates))
    with pytest.raises(ValueError, match="density target"):
        layout_for_density(4096, 128, 0.0)


def test_layout_specs_factors_and_max():
    cfg = BlocksparseBenchConfig(seqlens=[1024], factors=[1, "max", 3, 9], block=128,
                                 device="cpu").validate()
    specs = layout_specs(cfg, 1024)  # nb = 8: max = 3
    assert [s[0] for s in specs] == ["k=1", "k=3", "k=9"]
    assert [s[1] for s in specs] == [LayoutSpec(128, n_factors=k) for k in (1, 3, 9)]
    assert density(specs[1][2]) == pytest.approx(4 / 8)
    assert isinstance(specs[2][2], str) and "n_factors 9 is too large" in specs[2][2]


def test_layout_specs_of_any_pattern():
    """A pattern named by LayoutSpec fields runs without code of its own in the benchmark."""
    cfg = BlocksparseBenchConfig(seqlens=[1024], layouts=[{"n_factors": 1, "local_window": 1},
                                                          {"block_size": 64, "global_size": 2}],
                                 block=128, device="cpu").validate()
    specs = layout_specs(cfg, 1024)
    assert [s[1] for s in specs] == [LayoutSpec(128, n_factors=1, local_window=1),
                                     LayoutSpec(64, global_size=2)]
    assert [s[0] for s in specs] == ["n_factors=1,local_window=1", "block_size=64,global_size=2"]
    assert torch.equal(specs[0][2], specs[0][1].build(1024))
    with pytest.raises(ValueError, match="one of factors, densities and layouts"):
        BlocksparseBenchConfig(factors=[1], layouts=[{}], device="cpu").validate()
    with pytest.raises(ValueError, match="local_window must be >= 0"):
        BlocksparseBenchConfig(layouts=[{"local_window": -1}], device="cpu").validate()


@pytest.mark.parametrize("causal,padded", [(False, False), (True, True)])
def test_flex_block_mask_matches_reference(causal, padded):
    from torch.nn.attention.flex_attention import flex_attention
    n, block = 512, 128
    q, k, v = (torch.randn(2, 2, n, 16) for _ in range(3))
    layout = butterfly_layout(n, block, n_factors=1, global_size=1)
    lengths = torch.tensor([300, 512]) if padded else None
    mask = flex_block_mask(n, block, causal=causal, lengths=lengths, layout=layout)
    out = flex_attention(q, k, v, block_mask=mask).transpose(1, 2)
    kpm = None if lengths is None else torch.arange(n)[None] < lengths[:, None]
    ref, _ = reference_attention(*(t.transpose(1, 2).double() for t in (q, k, v)), causal=causal,
                                 key_padding_mask=kpm,
                                 attn_mask=expand_layout(layout, block, n)[None, None])
    assert (out.double() - ref).abs().max() < 1e-4
    # block lists: full blocks are layout blocks untouched by causal/padding
    assert mask.full_kv_num_blocks is not None
    assert flex_block_mask(n, block) is None


def test_blocksparse_bench_on_cpu_records_unsupported_and_writes(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # no interpreter runs of the kernels
    cfg = BlocksparseBenchConfig(seqlens=[256], head_dims=[8], factors=[1], block=64,
                                 tokens=256, hidden=16, dtype="fp32", device="cpu", warmup_ms=0,
                                 rep_ms=1, progress=False)
    rows = run_blocksparse_bench(cfg)
    assert {r["impl"] for r in rows} == {"flash", "blocksparse", "flex"}
    assert len(rows) == 4 * 2
    assert {r["impl"] for r in rows if r["layout"] == "dense"} == {"flash", "flex"}
    for r in rows:  # Triton kernels need CUDA; flex has no CPU backward
        assert r["status"] == "unsupported" and r["reason"]
    bs = [r for r in rows if r["impl"] == "blocksparse"][0]
    assert bs["density"] == pytest.approx(2 / 4) and bs["layout"] == "k=1"
    paths = write_blocksparse_reports(rows, tmp_path, cfg)
    assert json.loads(paths["json"].read_text())["config"]["block"] == 64
    assert "Effective TFLOP/s" in paths["md"].read_text()


def test_add_derived_ratio_and_effective_flops():
    base = {"seqlen": 4096, "head_dim": 64, "causal": 0, "pass": "fwd", "status": "ok"}
    rows = add_derived([base | {"impl": "flash", "ms": 2.0, "flops": 4e9},
                        base | {"impl": "blocksparse", "ms": 0.5, "flops": 1e9},
                        base | {"impl": "flex", "ms": None, "flops": 1e9, "status": "OOM"}])
    assert rows[1]["ratio_to_dense"] == 0.25 and rows[1]["dense_ms"] == 2.0
    assert rows[1]["tflops_effective"] == pytest.approx(1e9 / 0.5e-3 / 1e12)
    assert rows[2]["ratio_to_dense"] is None and rows[2]["tflops_effective"] is None


def test_blocksparse_cli_errors(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["blocksparse", "--out", str(tmp_path), "--device", "cpu", "--factors", "two"])
    assert "factors: 'two' is not an integer or 'max'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["blocksparse", "--out", str(tmp_path), "--device", "cpu", "--densities", "0,0.5"])
    assert "densities: 0.0 is not in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["blocksparse", "--out", str(tmp_path), "--factors", "1", "--densities", "0.5"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["blocksparse", "--out", str(tmp_path), "--device", "cpu", "--layouts", "{n_factors"])
    assert "--layouts: not JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["blocksparse", "--out", str(tmp_path), "--device", "cpu", "--layouts",
              '[{"n_factor": 1}]'])
    assert "is not a mapping of LayoutSpec fields" in capsys.readouterr().err


def test_blocksize_with_fake_forward(tmp_path):
    def fake_forward(q, k, v, causal, block_m, block_n):
        if block_m == 256:
            raise ValueError("block_m 256 needs too much shared memory")
        if block_n == 8:
            raise torch.OutOfMemoryError("fake OOM")
        return q * block_m
    cfg = BlocksizeBenchConfig(blocks=["16", "32x64", "8", "256"], batch=1, seqlen=32, heads=2,
                               head_dim=8, dtype="fp32", device="cpu", warmup_ms=0, rep_ms=1,
                               progress=False)
    rows = run_blocksize_bench(cfg, forward=fake_forward)
    assert [(r["block_m"], r["block_n"], r["status"]) for r in rows] == [
        (16, 16, "ok"), (32, 64, "ok"), (8, 8, "OOM"), (256, 256, "unsupported")]
    assert "shared memory" in rows[3]["reason"]
    assert rows[0]["tflops"] > 0
    paths = write_blocksize_reports(rows, tmp_path, cfg)
    assert (tmp_path / "blocksize_runtime.png").exists() and "block_m" in paths["md"].read_text()
    assert parse_block("128x64") == (128, 64) and parse_block("64") == (64, 64)
    with pytest.raises(ValueError, match="not a block size"):
        parse_block("64y2")


@pytest.mark.gpu
def test_gpu_blocksparse_smoke(tmp_path):
    cfg = BlocksparseBenchConfig(seqlens=[512], head_dims=[64], factors=[1], block=128,
                                 causal=[0, 1], tokens=1024, hidden=128, device="cuda",
                                 warmup_ms=1, rep_ms=5, progress=False)
    rows = run_blocksparse_bench(cfg)
    for r in rows:
        assert r["status"] == "ok", r
        assert r["check_passed"], r
    assert all(r["ratio_to_dense"] for r in rows if r["impl"] != "flash")
    write_blocksparse_reports(rows, tmp_path, cfg)


def test_blocksparse_and_flash_impls_run_the_kernels_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = BlocksparseBenchConfig(seqlens=[64], head_dims=[16], factors=[1], block=32, tokens=64,
                                 hidden=32, dtype="fp32", device="cpu", warmup_ms=0, rep_ms=1,
                                 impls=["blocksparse", "flash"], passes=["fwd+bwd"],
                                 progress=False)
    rows = run_blocksparse_bench(cfg)
    assert {r["impl"] for r in rows} == {"flash", "blocksparse"}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["check_passed"], r


def test_dropout_runs_our_kernels_and_leaves_flex_out(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = BlocksparseBenchConfig(seqlens=[64], head_dims=[16], factors=[1], block=32, tokens=64,
                                 hidden=32, dtype="fp32", device="cpu", warmup_ms=0, rep_ms=1,
                                 dropout_p=0.1, passes=["fwd+bwd"], progress=False)
    rows = {r["impl"]: r for r in run_blocksparse_bench(cfg)}
    for name in ("flash", "blocksparse"):  # the guard compares a dropout-free run
        assert rows[name]["status"] == "ok" and rows[name]["check_passed"], rows[name]
        assert rows[name]["dropout_p"] == 0.1
    assert rows["flex"]["status"] == "unsupported" and "dropout" in rows["flex"]["reason"]
    with pytest.raises(ValueError, match="dropout_p"):
        BlocksparseBenchConfig(dropout_p=1.0, device="cpu").validate()
