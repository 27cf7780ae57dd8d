"""GPU checks of the paper's baselines at realistic sizes: the sparse layouts (configs/attention/
longformer, bigbird, sparse_fixed, sparse_strided) through the block-sparse kernel in bf16 against
float64 dense attention with the same mask, forward and backward; the approximate baselines in
bf16 (finite, right dtype, gradients) and their exact special cases on CUDA."""
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from fa_train.attention import build_attention
from kernels import reference_attention
from tests.kernels.helpers import rel_err

pytestmark = pytest.mark.gpu
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "attention"


def _inputs(b, n, h, d, dtype, seed=0):
    torch.manual_seed(seed)
    return [torch.randn(b, n, h, d, device="cuda", dtype=dtype).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["longformer", "bigbird", "sparse_fixed", "sparse_strided"])
def test_sparse_layout_configs_match_masked_dense_attention(name, causal):
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    attn = build_attention(cfg)
    n = 2048
    q, k, v = _inputs(2, n, 4, 64, torch.bfloat16, seed=len(name))
    out = attn(q, k, v, causal=causal)
    g = torch.randn_like(out)
    out.backward(g)
    block = attn.config.block_size
    mask = attn.config.build(n).repeat_interleave(block, 0).repeat_interleave(block, 1).cuda()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, _ = reference_attention(*leaves, causal=causal, attn_mask=mask[None, None])
    ref.backward(g.double())
    for label, x, r in [("out", out, ref), ("dq", q.grad, leaves[0].grad),
                        ("dk", k.grad, leaves[1].grad), ("dv", v.grad, leaves[2].grad)]:
        assert rel_err(x, r) < 1e-2, f"{name} {label} rel err {rel_err(x, r):.2e}"


@pytest.mark.parametrize("name", ["linformer", "linear", "performer", "reformer", "smyrf"])
def test_approximate_configs_run_in_bf16_with_padding(name):
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    n = 4096
    attn = build_attention(cfg, max_seq_len=n)
    attn = attn.cuda() if isinstance(attn, torch.nn.Module) else attn
    q, k, v = _inputs(2, n, 8, 64, torch.bfloat16)
    kpm = torch.arange(n, device="cuda")[None] < torch.tensor([[n], [3000]], device="cuda")
    out = attn(q, k, v, key_padding_mask=kpm)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and torch.isfinite(out).all()
    out.float().square().mean().backward()
    for t in (q, v):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    if "causal" in attn.supports:
        causal = attn(q, k, v, causal=True)
        assert torch.isfinite(causal).all()


def test_exact_special_cases_on_cuda():
    q, k, v = (t.detach().float() for t in _inputs(2, 256, 4, 64, torch.float32))
    ref, _ = reference_attention(q.double(), k.double(), v.double())
    linformer = build_attention({"impl": "linformer", "k": 256}, max_seq_len=256).cuda()
    with torch.no_grad():
        linformer.E.copy_(torch.eye(256))
        linformer.F.copy_(torch.eye(256))
    assert rel_err(linformer(q, k, v), ref) < 1e-4
    smyrf = build_attention({"impl": "smyrf", "cluster_size": 256})
    assert rel_err(smyrf(q, k, v), ref) < 1e-4
    reformer = build_attention({"impl": "reformer", "n_buckets": 1, "bucket_size": 256})
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), F.normalize(q.double(), dim=-1))
    scores = scores / math.sqrt(64)
    scores = scores.masked_fill(torch.eye(256, dtype=torch.bool, device="cuda"), -5e4)
    shared = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v.double())
    assert rel_err(reformer(q, k, v), shared) < 1e-4
