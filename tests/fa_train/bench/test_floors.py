"""Dense attention floors: bytes and FLOPs of each pass counted by hand, peaks by GPU name."""
import pytest

from fa_train.bench.floors import (H100_SXM, H200_SXM, Peaks, attention_bytes, attention_floor,
                                   device_peaks)

# B = 1, H = 1, N = 128, d = 64 in bf16: one tensor is 128 * 64 * 2 = 16384 bytes, the fp32
# log-sum-exp 128 * 4 = 512 bytes; the forward's matmuls 4 * 128 * 128 * 64 = 4194304 FLOPs.
TENSOR, LSE, FWD_FLOPS = 16384, 512, 4194304
SMALL = (1, 1, 128, 64)


@pytest.mark.parametrize("mode,nbytes", [
    ("fwd", 4 * TENSOR),                     # read q, k, v; write o
    ("bwd", 8 * TENSOR + LSE),               # read q, k, v, o, dO, lse; write dq, dk, dv
    ("fwd+bwd", 12 * TENSOR + 2 * LSE),      # both, the forward writing the lse
])
def test_bytes_of_each_pass(mode, nbytes):
    assert attention_bytes(*SMALL, mode) == attention_bytes(*SMALL, mode, "fp16") == nbytes


@pytest.mark.parametrize("mode,causal,flops", [
    ("fwd", False, FWD_FLOPS), ("fwd", True, FWD_FLOPS // 2),
    ("bwd", False, 2.5 * FWD_FLOPS), ("fwd+bwd", True, 3.5 * FWD_FLOPS / 2),
])
def test_flops_follow_the_bench_convention(mode, causal, flops):
    assert attention_floor(*SMALL, causal, "bf16", mode)["flops"] == flops


def test_floor_is_the_longer_of_memory_and_matmuls():
    peaks = Peaks(hbm_bytes_per_s=1e9, flops_per_s=1e12)
    fwd = attention_floor(*SMALL, False, "bf16", "fwd", peaks)
    assert fwd == {"floor_bytes": 4 * TENSOR, "flops": FWD_FLOPS,
                   "floor_ms": 4 * TENSOR / 1e9 * 1e3, "floor_bound": "memory"}
    slow_matmuls = attention_floor(*SMALL, False, "bf16", "fwd", Peaks(1e12, 1e9))
    assert slow_matmuls["floor_ms"] == FWD_FLOPS / 1e9 * 1e3
    assert slow_matmuls["floor_bound"] == "compute"
    # a long sequence on the H100 is bound by its matmuls: 4·B·H·N²·d / 989e12 s
    long = attention_floor(4, 16, 4096, 128, False, "bf16", "fwd+bwd")
    assert long["floor_bound"] == "compute"
    assert long["floor_ms"] == pytest.approx(3.5 * 4 * 4 * 16 * 4096**2 * 128 / 989e12 * 1e3)
    windowed = attention_floor(*SMALL, False, "bf16", "fwd", peaks, density=0.25)
    assert windowed["flops"] == FWD_FLOPS / 4 and windowed["floor_bytes"] == 4 * TENSOR


def test_peaks_by_exact_gpu_name_and_tensor_core_dtype():
    assert device_peaks("NVIDIA H100 80GB HBM3", "bf16") == H100_SXM == (3.35e12, 989e12)
    assert device_peaks("NVIDIA H200", "fp16") == H200_SXM == (4.8e12, 989e12)
    for name in ("NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", None):
        assert device_peaks(name, "bf16") is None
    assert device_peaks("NVIDIA H100 80GB HBM3", "fp32") is None
