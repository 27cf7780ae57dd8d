"""Block-sparse FlashAttention (paper Algorithm 5): the dense kernels, visiting listed blocks only.

A layout is an (nb_q, nb_k) bool block mask at `block_size` granularity. It is turned into CSR
index lists once (`BlockSparseIndex`): per query block the nonzero key blocks (forward and dQ),
per key block the nonzero query blocks (dK, dV), so work is proportional to the nonzero blocks.
"""
from dataclasses import dataclass

import torch
import triton

from kernels.flash_attn import attention_call, check_key_padding_mask, check_qkv

BLOCK_SIZES = (16, 32, 64, 128)


def _csr(mask):
    """(ptr, idx) int32 tensors listing the nonzero columns of each row of a bool matrix."""
    counts = mask.sum(dim=1, dtype=torch.int32)
    ptr = torch.zeros(mask.shape[0] + 1, dtype=torch.int32, device=mask.device)
    ptr[1:] = torch.cumsum(counts, 0)
    idx = mask.nonzero()[:, 1].to(torch.int32).contiguous()
    return ptr, idx


def causal_block_mask(nb_q, nb_k, block, seqlen_q, seqlen_k, device=None):
    """Blocks (i, j) holding at least one visible (query, key) pair under the bottom-right mask."""
    diag = seqlen_k - seqlen_q
    last_row = torch.clamp((torch.arange(nb_q, device=device) + 1) * block, max=seqlen_q) - 1
    first_col = torch.arange(nb_k, device=device) * block
    return first_col[None, :] <= last_row[:, None] + diag


@dataclass
class BlockSparseIndex:
    """CSR lists of a block layout, ready for the kernels (build once, reuse across calls)."""

    block: int
    shape: tuple
    row_ptr: torch.Tensor
    col_idx: torch.Tensor
    col_ptr: torch.Tensor
    row_idx: torch.Tensor
    density: float

    @classmethod
    def from_layout(cls, layout, block_size, device=None):
        if block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
        if not isinstance(layout, torch.Tensor) or layout.dim() != 2:
            raise ValueError("layout must be a 2-D (nb_q, nb_k) bool tensor")
        layout = layout.to(device=device or layout.device, dtype=torch.bool)
        row_ptr, col_idx = _csr(layout)
        col_ptr, row_idx = _csr(layout.t())
        density = float(layout.float().mean()) if layout.numel() else 0.0
        return cls(block_size, tuple(layout.shape), row_ptr, col_idx, col_ptr, row_idx, density)


def _prepare_index(layout, block_size, causal, seqlen_q, seqlen_k, device):
    nb = (triton.cdiv(seqlen_q, block_size), triton.cdiv(seqlen_k, block_size))
    if isinstance(layout, BlockSparseIndex):
        if layout.block != block_size or layout.shape != nb:
            raise ValueError(f"layout index is {layout.shape} blocks of {layout.block}; "
                             f"expected {nb} blocks of {block_size}")
        return layout
    if not isinstance(layout, torch.Tensor) or tuple(layout.shape) != nb:
        got = tuple(layout.shape) if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise ValueError(f"layout must be a bool tensor of shape (ceil(Nq/{block_size}), "
                         f"ceil(Nk/{block_size})) = {nb}, got {got}")
    layout = layout.to(device=device, dtype=torch.bool)
    if causal:
        layout = layout & causal_block_mask(*nb, block_size, seqlen_q, seqlen_k, device)
    return BlockSparseIndex.from_layout(layout, block_size)


def blocksparse_attn_func(q, k, v, layout, block_size=128, dropout_p=0.0, softmax_scale=None,
                          causal=False, key_padding_mask=None, return_lse=False):
    """Attention restricted to the nonzero blocks of `layout`; q (B, Nq, Hq, d), k/v (B, Nk, Hkv, d).

    layout: (ceil(Nq/block_size), ceil(Nk/block_size)) bool tensor (shared by all batches and
    heads), or a prebuilt BlockSparseIndex (for a causal call, build it from a layout already
    intersected with `causal_block_mask`). Inside the nonzero blocks the usual causal and padding
    masks apply. Rows whose blocks are all zero give zero output and zero gradients.
    """
    q, k, v = check_qkv(q, k, v, 4)
    kpm = check_key_padding_mask(key_padding_mask, q, k)
    index = _prepare_index(layout, block_size, causal, q.shape[1], k.shape[1], q.device)
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm, sparse=index)
    return (out, lse) if return_lse else out
