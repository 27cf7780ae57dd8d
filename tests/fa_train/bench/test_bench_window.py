"""fa-bench attention --window on CPU: local and flex compute the sliding window (checked against
the float64 reference with it), dense flash full attention beside them; FLOPs count the kept
pairs; FlexAttention's sliding-window block mask lists only the blocks the window touches."""
import json

import pytest
import torch

from fa_train.bench import run_attention_bench
from fa_train.bench.attention import window_density
from fa_train.bench.cli import main
from fa_train.bench.impls import flex_block_mask
from kernels import reference_attention

TINY = dict(seqlens=[32, 64], head_dims=[16], causal=[0, 1], tokens=128, hidden=32,
            dtype="fp32", device="cpu", warmup_ms=0, rep_ms=1, progress=False, window=8,
            passes=["fwd", "fwd+bwd"])


@pytest.mark.parametrize("seqlen,window,causal", [(10, 3, False), (10, 3, True), (7, 20, False)])
def test_window_density_counts_the_kept_pairs(seqlen, window, causal):
    rows, cols = torch.arange(seqlen)[:, None], torch.arange(seqlen)[None, :]
    kept = (cols >= rows - window) & (cols <= rows + (0 if causal else window))
    assert window_density(seqlen, window, causal) == pytest.approx(kept.float().mean().item())


@pytest.mark.parametrize("causal", [False, True])
def test_flex_sliding_window_mask_matches_reference(causal):
    from torch.nn.attention.flex_attention import flex_attention
    n, block, window = 96, 16, 10
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    mask = flex_block_mask(n, block, causal=causal, window=window)
    out = flex_attention(q, k, v, block_mask=mask).transpose(1, 2)
    ref, _ = reference_attention(*(t.transpose(1, 2).double() for t in (q, k, v)), causal=causal,
                                 window_size=(window, window))
    assert (out.double() - ref).abs().max() < 1e-4
    # a 10-key window reaches one block each side; no block is full
    blocks = torch.arange(n // block)
    near = (blocks[None, :] - blocks[:, None]).abs() <= 1
    if causal:
        near &= blocks[None, :] <= blocks[:, None]
    assert torch.equal(mask.to_dense()[0, 0].bool(), near)
    assert int(mask.full_kv_num_blocks.sum()) == 0


def test_window_rows_beside_dense_flash():
    rows = run_attention_bench(dict(TINY, impls=["local", "flex", "flash"]))
    assert len(rows) == 3 * 2 * 2 * 2  # impls x seqlens x causal x passes
    # FlexAttention has no backward on the CPU (the mask test above checks its window)
    for r in rows:
        assert r["status"] == ("unsupported" if r["impl"] == "flex" else "ok"), r["reason"]
    checked = [r for r in rows if r["seqlen"] == 32 and r["impl"] != "flex"]
    assert all(r["check_passed"] and r["check_rel_err"] < 1e-4 for r in checked)
    for r in rows:
        assert r["window"] == (None if r["impl"] == "flash" else 8)
    for seqlen in (32, 64):
        by_impl = {r["impl"]: r["flops"] for r in rows
                   if (r["seqlen"], r["causal"], r["pass"]) == (seqlen, 0, "fwd")}
        assert by_impl["local"] == by_impl["flex"] == pytest.approx(
            by_impl["flash"] * window_density(seqlen, 8, False))


def test_local_needs_a_window():
    rows = run_attention_bench(dict(TINY, impls=["local"], window=None, seqlens=[32]))
    assert all(r["status"] == "unsupported" and "--window" in r["reason"] for r in rows)


def test_cli_window_run_writes_json(tmp_path):
    out = tmp_path / "res"
    assert main(["attention", "--out", str(out), "--device", "cpu", "--dtype", "fp32",
                 "--window", "8", "--seqlens", "32", "--head-dims", "16", "--causal", "0",
                 "--tokens", "64", "--hidden", "32", "--passes", "fwd+bwd", "--rep-ms", "1",
                 "--warmup-ms", "0", "--no-progress"]) == 0
    data = json.loads((out / "attention.json").read_text())
    assert data["config"]["window"] == 8
    assert data["config"]["impls"] == ["local", "flex", "flash"]
    assert {r["impl"] for r in data["rows"]} == {"local", "flex", "flash"}
    assert "Sliding window: 8 keys" in (out / "attention.md").read_text()


def test_bad_window_is_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["attention", "--out", str(tmp_path), "--device", "cpu", "--window", "0"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "window" in err and "positive" in err


@pytest.mark.gpu
def test_gpu_window_rows(tmp_path):
    cfg = dict(impls=["local", "flex", "flash"], seqlens=[1024, 4096], head_dims=[64],
               causal=[0, 1], tokens=8192, hidden=1024, passes=["fwd+bwd"], window=128,
               device="cuda", warmup_ms=1, rep_ms=5, progress=False)
    rows = run_attention_bench(cfg)
    assert len(rows) == 12 and all(r["status"] == "ok" and r["ms"] > 0 for r in rows), rows
    assert all(r["check_passed"] for r in rows if r["seqlen"] == 1024)
    for causal in (0, 1):  # the counted work of a window stays flat at a fixed token budget
        flops = {(r["impl"], r["seqlen"]): r["flops"] for r in rows if r["causal"] == causal}
        assert flops[("local", 4096)] < 1.2 * flops[("local", 1024)]
        assert flops[("local", 4096)] < flops[("flash", 4096)] / 8
