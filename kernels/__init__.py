"""Triton FlashAttention kernels (dense and block-sparse) and their float64 ground truth."""
from kernels.reference import reference_attention

__all__ = ["reference_attention"]
