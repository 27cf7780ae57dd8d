"""Triton FlashAttention kernels (dense, block-sparse, KV-cache decoding) and their float64 ground
truth.

The exports load on first use, so that `kernels.layouts` and `kernels.reference` (plain PyTorch)
import where Triton is not installed, and `import kernels` costs nothing until a kernel is used.
"""
import importlib

__fa_train_kernels__ = True  # marks this package as fa-train's (fa_train.check_kernels_package)

_HOMES = {
    "dropout_mask": "kernels.flash_attn",
    "flash_attn_forward": "kernels.flash_attn",
    "flash_attn_func": "kernels.flash_attn",
    "flash_attn_qkvpacked_func": "kernels.flash_attn",
    "flash_attn_varlen_func": "kernels.flash_attn",
    "flash_attn_varlen_qkvpacked_func": "kernels.flash_attn",
    "next_dropout_seed": "kernels.flash_attn",
    "reference_attention": "kernels.reference",
    "reference_attention_with_kvcache": "kernels.reference",
    "flash_attn_with_kvcache": "kernels.decode",
    "BlockSparseIndex": "kernels.blocksparse",
    "blocksparse_attn_func": "kernels.blocksparse",
    "causal_block_mask": "kernels.blocksparse",
}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
