"""fa-train: reproduce the FlashAttention paper's experiments on our own Triton kernels."""

__version__ = "0.1.0"
