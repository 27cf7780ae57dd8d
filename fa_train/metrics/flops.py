"""FLOP formulas: every FLOP count in the project comes from this module.

Conventions (see the README):
- attention forward = 4·B·H·Nq·Nk·d, halved when causal (Nq == Nk); backward = 2.5 x forward;
  fwd+bwd = 3.5 x forward. Block-sparse "effective" FLOPs scale the dense count by the density.
- training FLOPs per token = 6·P + 12·L·H·Q·T (PaLM appendix B): P parameters (without the
  position embeddings is common; we count all), L layers, H heads, Q head dim, T sequence length.
"""

PASS_FACTORS = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}


def attention_flops(batch, seqlen_q, seqlen_k, heads, head_dim, causal=False, mode="fwd",
                    density=1.0):
    """FLOPs of one attention call for `mode` in {'fwd', 'bwd', 'fwd+bwd'}."""
    if mode not in PASS_FACTORS:
        raise ValueError(f"mode must be one of {sorted(PASS_FACTORS)}, got {mode!r}")
    forward = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    if causal:
        forward /= 2.0
    return forward * PASS_FACTORS[mode] * density


def transformer_flops_per_token(n_params, n_layers, n_heads, head_dim, seq_len):
    """Training FLOPs per token, forward and backward: 6·P + 12·L·H·Q·T."""
    return 6.0 * n_params + 12.0 * n_layers * n_heads * head_dim * seq_len


# Dense bf16 tensor-core peaks (FLOP/s) by device-name substring, for MFU.
GPU_PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "A10G": 125e12,
    "L4": 121e12,
    "4090": 165e12,
    "V100": 125e12,
}


def gpu_peak_flops(device_name):
    """Peak dense bf16 FLOP/s of a GPU from its name, or None when unknown."""
    for key, peak in GPU_PEAK_BF16.items():
        if key in device_name:
            return peak
    return None
