"""Per-pass floors of dense attention: the HBM bytes a pass must move at peak bandwidth and its
matmul FLOPs at the tensor-core peak; no kernel can run faster than the larger of the two.

Bytes (B·H·N·d elements per tensor): the forward reads q, k, v and writes o; the backward reads
q, k, v, o, dO and the forward's fp32 log-sum-exp (B·H·N) and writes dq, dk, dv; forward+backward
is both, the forward also writing the log-sum-exp. FLOPs: fa_train.metrics.flops.attention_flops
(the benchmarks' convention: 4·B·H·N²·d forward, halved when causal; backward 2.5x).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from fa_train.metrics.flops import GPU_PEAK_BF16, attention_flops

LSE_BYTES = 4  # fp32 log-sum-exp per query row
# B·H·N·d tensors read or written: q,k,v,o | q,k,v,o,dO,dq,dk,dv | both
TENSORS_MOVED = {"fwd": 4, "bwd": 8, "fwd+bwd": 12}
LSE_MOVES = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}  # the forward writes it, the backward reads it
# Tensor-core peaks apply to these element types only (fp32 matmuls run elsewhere).
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}


class Peaks(NamedTuple):
    hbm_bytes_per_s: float
    flops_per_s: float  # dense bf16/fp16 tensor-core


# NVIDIA H100 SXM5 datasheet: 3.35 TB/s HBM3, 989 TFLOP/s dense bf16 (1979 with sparsity).
H100_SXM = Peaks(3.35e12, GPU_PEAK_BF16["H100"])
# NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, the H100's tensor cores.
H200_SXM = Peaks(4.8e12, GPU_PEAK_BF16["H200"])
# By torch.cuda.get_device_name, exactly: PCIe and NVL parts differ in both peaks.
DEVICE_PEAKS = {"NVIDIA H100 80GB HBM3": H100_SXM, "NVIDIA H200": H200_SXM}


def device_peaks(gpu_name: Optional[str], dtype: str) -> Optional[Peaks]:
    """The peaks of a GPU by name for a bench dtype, or None when unknown (no guessing)."""
    return DEVICE_PEAKS.get(gpu_name) if dtype in ELEMENT_BYTES else None


def attention_bytes(batch, heads, seqlen, head_dim, mode, dtype="bf16"):
    """HBM bytes that pass `mode` (fwd, bwd, fwd+bwd) must read and write at least."""
    rows = batch * heads * seqlen
    return (TENSORS_MOVED[mode] * rows * head_dim * ELEMENT_BYTES[dtype]
            + LSE_MOVES[mode] * rows * LSE_BYTES)


def attention_floor(batch, heads, seqlen, head_dim, causal, dtype, mode, peaks=H100_SXM,
                    density=1.0):
    """{"floor_bytes", "flops", "floor_ms", "floor_bound"} of one pass at `peaks`; floor_bound
    names the larger term ("memory" or "compute"). `density` scales the FLOPs (a window)."""
    nbytes = attention_bytes(batch, heads, seqlen, head_dim, mode, dtype)
    flops = attention_flops(batch, seqlen, seqlen, heads, head_dim, causal=causal, mode=mode,
                            density=density)
    memory_ms, compute_ms = nbytes / peaks.hbm_bytes_per_s * 1e3, flops / peaks.flops_per_s * 1e3
    return {"floor_bytes": nbytes, "flops": flops, "floor_ms": max(memory_ms, compute_ms),
            "floor_bound": "memory" if memory_ms > compute_ms else "compute"}
