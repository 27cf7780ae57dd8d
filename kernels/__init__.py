"""Triton FlashAttention kernels (dense and block-sparse) and their float64 ground truth."""
__fa_train_kernels__ = True  # marks this package as fa-train's (fa_train.check_kernels_package)
from kernels.flash_attn import (
    dropout_mask,
    flash_attn_forward,
    flash_attn_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_qkvpacked_func,
    next_dropout_seed,
)
from kernels.reference import reference_attention

__all__ = [
    "dropout_mask",
    "flash_attn_forward",
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "next_dropout_seed",
    "reference_attention",
]
from kernels.blocksparse import BlockSparseIndex, blocksparse_attn_func, causal_block_mask

__all__ += ["BlockSparseIndex", "blocksparse_attn_func", "causal_block_mask"]
