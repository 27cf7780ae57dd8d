"""blocksparse: our block-sparse Triton kernel (kernels.blocksparse) over the layout that its
config names (a kernels.layouts.LayoutSpec, the keys of configs/attention/blocksparse.yaml)."""
from __future__ import annotations

import torch

from fa_train.attention.base import Attention
from fa_train.attention.flash import check_triton_device
from kernels.layouts import LayoutSpec, density


class BlocksparseAttention(Attention):
    """Each (seqlen, device, causal) gets its layout's CSR block lists built once and kept;
    `stats()` describes the layout of the last call."""

    name = "blocksparse"
    supports = frozenset({"causal", "key_padding_mask", "dropout", "gqa", "varlen"})
    runs_triton = True
    Config = LayoutSpec

    def __init__(self, config: LayoutSpec | None = None):
        super().__init__(config)
        self._indexes: dict[tuple, object] = {}
        self._stats: dict[tuple, dict] = {}
        self._last: tuple | None = None

    def index(self, seqlen: int, device, causal: bool = False):
        """The kernel's block lists (kernels.BlockSparseIndex) for `seqlen` tokens on `device`."""
        key = (seqlen, str(device), bool(causal))
        self._last = key
        index = self._indexes.get(key)
        if index is None:
            from kernels import BlockSparseIndex
            layout = self.config.build(seqlen, causal)
            block = self.config.block_size
            index = BlockSparseIndex.from_layout(layout.to(device), block, seqlen, seqlen, causal,
                                                 device)
            self._indexes[key] = index
            self._stats[key] = dict(blocksparse_seqlen=seqlen, blocksparse_block_size=block,
                                    blocksparse_density=density(layout),
                                    blocksparse_causal=bool(causal))
        return index

    def stats(self):
        """Sequence length, block size, density and causal flag of the last call's layout."""
        return dict(self._stats[self._last]) if self._last is not None else {}

    # torch.compile runs this eagerly (a graph break): the block lists are built and cached in
    # Python, which tracing cannot follow. The dense flash path needs no break: its kernels are
    # torch ops that compiled graphs call as nodes of their own.
    @torch.compiler.disable
    def forward(self, q, k, v, causal, dropout_p, softmax_scale, key_padding_mask=None):
        check_triton_device(q, self.name)
        from kernels import blocksparse_attn_func
        index = self.index(q.shape[1], q.device, causal)
        return blocksparse_attn_func(q, k, v, index, block_size=self.config.block_size,
                                     dropout_p=dropout_p, softmax_scale=softmax_scale,
                                     causal=causal, key_padding_mask=key_padding_mask)
