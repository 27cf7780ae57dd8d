"""Block-sparse FlashAttention (paper Algorithm 5): the dense kernels, visiting listed blocks only.

A layout is an (nb_q, nb_k) bool block mask at `block_size` granularity. It is turned into CSR
index lists once (`BlockSparseIndex`): per query block the nonzero key blocks (forward and dQ),
per key block the nonzero query blocks (dK, dV), so work is proportional to the nonzero blocks.
"""
from dataclasses import dataclass

import torch

from kernels.attention_inputs import check_key_padding_mask, check_qkv
from kernels.attention_launch import cdiv
from kernels.attention_op import attention_call

BLOCK_SIZES = (16, 32, 64, 128)


def _csr(layout, partial):
    """CSR lists of a bool block matrix: (ptr, split, idx) int32.

    Within each row the blocks that need no element mask come first; `split[r]` is where the
    blocks needing a mask (causal diagonal, ragged last block) begin.
    """
    n_rows = layout.shape[0]
    rows, cols = layout.nonzero(as_tuple=True)
    flag = partial[rows, cols].long()
    order = torch.argsort(rows * 2 + flag, stable=True)
    rows, cols, flag = rows[order], cols[order], flag[order]
    ptr = torch.zeros(n_rows + 1, dtype=torch.int64, device=layout.device)
    ptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n_rows), 0)
    split = ptr[:-1] + torch.bincount(rows[flag == 0], minlength=n_rows)
    return ptr.int(), split.int(), cols.int().contiguous()


def causal_block_mask(nb_q, nb_k, block, seqlen_q, seqlen_k, device=None):
    """Blocks (i, j) holding at least one visible (query, key) pair under the bottom-right mask."""
    diag = seqlen_k - seqlen_q
    last_row = torch.clamp((torch.arange(nb_q, device=device) + 1) * block, max=seqlen_q) - 1
    first_col = torch.arange(nb_k, device=device) * block
    return first_col[None, :] <= last_row[:, None] + diag


def _blocks_needing_mask(nb_q, nb_k, block, seqlen_q, seqlen_k, causal, device):
    """Blocks cut by the causal diagonal or by a ragged sequence end."""
    partial = torch.zeros(nb_q, nb_k, dtype=torch.bool, device=device)
    if seqlen_q % block:
        partial[-1, :] = True
    if seqlen_k % block:
        partial[:, -1] = True
    if causal:
        first_row = torch.arange(nb_q, device=device) * block
        last_col = (torch.arange(nb_k, device=device) + 1) * block - 1
        partial |= last_col[None, :] > first_row[:, None] + (seqlen_k - seqlen_q)
    return partial


@dataclass
class BlockSparseIndex:
    """CSR lists of a block layout for given sequence lengths (build once, reuse across calls)."""

    block: int
    shape: tuple
    seqlens: tuple
    causal: bool
    row_ptr: torch.Tensor
    row_split: torch.Tensor
    col_idx: torch.Tensor
    col_ptr: torch.Tensor
    col_split: torch.Tensor
    row_idx: torch.Tensor
    density: float

    @classmethod
    def from_layout(cls, layout, block_size, seqlen_q=None, seqlen_k=None, causal=False,
                    device=None):
        """Index of `layout` (intersected with the causal block mask when causal)."""
        if block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
        if not isinstance(layout, torch.Tensor) or layout.dim() != 2:
            raise ValueError("layout must be a 2-D (nb_q, nb_k) bool tensor")
        nb_q, nb_k = layout.shape
        seqlen_q = seqlen_q or nb_q * block_size
        seqlen_k = seqlen_k or nb_k * block_size
        if (cdiv(seqlen_q, block_size), cdiv(seqlen_k, block_size)) != (nb_q, nb_k):
            raise ValueError(f"layout of {nb_q}x{nb_k} blocks does not fit sequence lengths "
                             f"({seqlen_q}, {seqlen_k}) with block_size {block_size}")
        device = device or layout.device
        layout = layout.to(device=device, dtype=torch.bool)
        if causal:
            layout = layout & causal_block_mask(nb_q, nb_k, block_size, seqlen_q, seqlen_k, device)
        partial = _blocks_needing_mask(nb_q, nb_k, block_size, seqlen_q, seqlen_k, causal, device)
        row_lists = _csr(layout, partial)
        col_lists = _csr(layout.t(), partial.t())
        density = float(layout.float().mean()) if layout.numel() else 0.0
        return cls(block_size, (nb_q, nb_k), (seqlen_q, seqlen_k), bool(causal), *row_lists,
                   *col_lists, density)

    def row_lists(self):
        return self.row_ptr, self.row_split, self.col_idx

    def col_lists(self):
        return self.col_ptr, self.col_split, self.row_idx


def _prepare_index(layout, block_size, causal, seqlen_q, seqlen_k, device):
    if isinstance(layout, BlockSparseIndex):
        wanted = (block_size, (seqlen_q, seqlen_k), bool(causal))
        if (layout.block, layout.seqlens, layout.causal) != wanted:
            raise ValueError(f"layout index was built for (block, seqlens, causal) = "
                             f"{(layout.block, layout.seqlens, layout.causal)}, call needs {wanted}")
        return layout
    nb = (cdiv(seqlen_q, block_size), cdiv(seqlen_k, block_size))
    if not isinstance(layout, torch.Tensor) or tuple(layout.shape) != nb:
        got = tuple(layout.shape) if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise ValueError(f"layout must be a bool tensor of shape (ceil(Nq/{block_size}), "
                         f"ceil(Nk/{block_size})) = {nb}, got {got}")
    return BlockSparseIndex.from_layout(layout, block_size, seqlen_q, seqlen_k, causal, device)


def blocksparse_attn_func(q, k, v, layout, block_size=128, dropout_p=0.0, softmax_scale=None,
                          causal=False, key_padding_mask=None, return_lse=False,
                          deterministic=False):
    """Attention restricted to the nonzero blocks of `layout`; q (B, Nq, Hq, d), k/v (B, Nk, Hkv, d).

    layout: (ceil(Nq/block_size), ceil(Nk/block_size)) bool tensor (shared by all batches and
    heads), or a BlockSparseIndex prebuilt for the same sequence lengths and causal flag. Inside the nonzero blocks the usual causal and padding
    masks apply. Rows whose blocks are all zero give zero output and zero gradients.
    deterministic: as in flash_attn_func.
    """
    q, k, v = check_qkv(q, k, v, 4)
    kpm = check_key_padding_mask(key_padding_mask, q, k)
    index = _prepare_index(layout, block_size, causal, q.shape[1], k.shape[1], q.device)
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm, sparse=index,
                              deterministic=deterministic)
    return (out, lse) if return_lse else out
