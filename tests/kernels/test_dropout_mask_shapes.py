"""kernels.dropout_mask at every shape the attention kernels accept, sequence lengths of 1
included: it compiles for a GPU, and it is the mask the kernels apply."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import (dropout_mask, flash_attn_func, flash_attn_varlen_func, next_dropout_seed,
                     reference_attention)

from .helpers import rel_err

REPO = Path(__file__).resolve().parents[2]


# Compiled in a child process without TRITON_INTERPRET (the interpreter replaces the kernels).
# The signature is the one a launch binds: Triton makes an int argument equal to 1 a constexpr
# unless the kernel lists it in do_not_specialize.
COMPILE = """
import sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.attention_kernels import dropout_mask_kernel as kern
lengths = dict(seqlen_q=int(sys.argv[1]), seqlen_k=int(sys.argv[2]))
sig = {"MASK": "*i8", "seqlen_q": "i32", "seqlen_k": "i32", "dropout_p": "fp32", "SEED": "*i64",
       "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
consts = {"BLOCK_M": 32, "BLOCK_N": 32}
for p in kern.params:
    if lengths.get(p.name) == 1 and not p.do_not_specialize:
        sig[p.name], consts[p.name] = "constexpr", 1
compiled = triton.compile(ASTSource(kern, sig, consts), target=GPUTarget("cuda", 90, 32))
print(sorted(compiled.asm))
"""


@pytest.mark.parametrize("seqlen_q,seqlen_k", [(239, 1), (1, 239), (1, 1), (239, 17)])
def test_dropout_mask_kernel_compiles_for_sm90(seqlen_q, seqlen_k):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE, str(seqlen_q), str(seqlen_k)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'ttgir'" in proc.stdout


@pytest.mark.parametrize("seqlen_q,seqlen_k,head_dim", [(239, 1, 80), (1, 239, 80), (1, 1, 64)])
def test_dense_dropout_uses_the_helpers_mask_at_unit_lengths(seqlen_q, seqlen_k, head_dim):
    torch.manual_seed(seqlen_q * 1000 + seqlen_k)
    q = torch.randn(1, seqlen_q, 2, head_dim)
    k, v = torch.randn(2, 1, seqlen_k, 2, head_dim).unbind(0)
    seed = next_dropout_seed("cpu")
    out = flash_attn_func(q, k, v, dropout_p=0.2)
    keep = dropout_mask(1, 2, seqlen_q, seqlen_k, 0.2, seed, "cpu")
    assert keep.shape == (1, 2, seqlen_q, seqlen_k)
    ref, _ = reference_attention(q.double(), k.double(), v.double(), dropout_mask=keep,
                                 dropout_p=0.2)
    assert rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("seqlen_k", [1, 7, 33])
def test_varlen_single_query_drops_exactly_the_helpers_keys(seqlen_k):
    """seqlen_q = 1 in every sequence: with a uniform softmax and V = identity, out[b, h, j] > 0
    exactly when key j is kept."""
    n_seq, heads, d = 6, 2, 64
    q = torch.zeros(n_seq, heads, d)
    k = torch.randn(n_seq * seqlen_k, heads, d)
    v = torch.zeros(n_seq * seqlen_k, heads, d)
    rows = torch.arange(n_seq * seqlen_k)
    v[rows, :, rows % seqlen_k] = 1.0
    cu_q = torch.arange(n_seq + 1, dtype=torch.int32)
    cu_k = torch.arange(0, n_seq * seqlen_k + 1, seqlen_k, dtype=torch.int32)
    seed = next_dropout_seed("cpu")
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 1, seqlen_k, dropout_p=0.3)
    keep = dropout_mask(n_seq, heads, 1, seqlen_k, 0.3, seed, "cpu")[:, :, 0, :]
    assert torch.equal(out[:, :, :seqlen_k] > 0, keep)


def test_single_query_row_drops_at_the_rate_within_binomial_noise():
    """Row 0 (the only row when seqlen_q = 1) over 256 heads: within 4 standard deviations."""
    p, heads = 0.3, 256
    keep = dropout_mask(1, heads, 1, 32, p, seed=1_000_003, device="cpu")
    n = keep.numel()
    assert abs((~keep).float().mean().item() - p) < 4 * math.sqrt(p * (1 - p) / n)
