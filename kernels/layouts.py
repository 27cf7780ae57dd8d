"""Block-sparse attention layouts: (nb_q, nb_k) bool block masks, pure torch.

A layout at block size `block` for a sequence of `seqlen` tokens has nb = ceil(seqlen / block)
block rows and columns; layout[i, j] is True when query block i may attend to key block j.
The butterfly pattern is the "flat block butterfly" of Pixelated Butterfly (Chen et al., 2022):
block (i, j) is nonzero iff i XOR j is in {0, 1, 2, ..., 2^(k-1)} inside each butterfly_size x
butterfly_size diagonal group, plus optional dense global block rows/columns. `LayoutSpec` names
a pattern by these parameters and builds it for a sequence length.

The sparse baselines of the FlashAttention paper are layouts too (`LayoutSpec.layout`):
Longformer (a local window and global tokens, Beltagy et al., 2020), BigBird (the same plus
seeded random blocks, Zaheer et al., 2020) and the Sparse Transformer's fixed and strided patterns
(Child et al., 2019), all at block granularity and bidirectional (cut to the lower block triangle
when causal).
"""
from dataclasses import dataclass, fields
from typing import Optional

import torch

__all__ = [
    "LayoutSpec",
    "num_blocks",
    "butterfly_layout",
    "local_layout",
    "global_layout",
    "random_layout",
    "fixed_layout",
    "strided_layout",
    "LAYOUT_KINDS",
    "causal_layout",
    "layout_union",
    "layout_intersection",
    "density",
    "density_report",
]


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_butterfly_size(value):
    _check_int("butterfly_size", value, 1)
    if not _is_power_of_two(value):
        raise ValueError(f"butterfly_size must be a power of two (in blocks), got {value}")


def _is_power_of_two(n):
    return n >= 1 and n & (n - 1) == 0


def num_blocks(seqlen, block):
    """Number of blocks covering `seqlen` tokens: ceil(seqlen / block)."""
    _check_int("seqlen", seqlen, 1)
    _check_int("block", block, 1)
    return -(-seqlen // block)


def _index_grid(nb):
    idx = torch.arange(nb)
    return idx[:, None], idx[None, :]


def butterfly_layout(seqlen, block, butterfly_size=None, n_factors=None, global_size=0):
    """Flat block butterfly layout, (nb, nb) bool.

    butterfly_size: group size b in blocks, a power of two; default the next power of two >= nb.
        A b smaller than nb tiles the b x b pattern along the diagonal (zero outside the groups);
        a b larger than nb behaves like the next power of two >= nb.
    n_factors: number of butterfly factors k, 0 <= k <= log2(b); default log2(b). Factor t joins
        blocks whose indices differ by XOR 2^t, so each full row has k + 1 nonzero blocks.
    global_size: number of leading block rows and columns made fully dense (global tokens);
        values above nb make the whole layout dense.
    """
    nb = num_blocks(seqlen, block)
    if butterfly_size is None:
        butterfly_size = 1 << (nb - 1).bit_length()
    _check_butterfly_size(butterfly_size)
    max_factors = butterfly_size.bit_length() - 1
    if n_factors is None:
        n_factors = max_factors
    _check_int("n_factors", n_factors, 0)
    if n_factors > max_factors:
        raise ValueError(f"n_factors {n_factors} is too large for butterfly_size {butterfly_size}: "
                         f"at most log2(butterfly_size) = {max_factors}")
    _check_int("global_size", global_size, 0)
    rows, cols = _index_grid(nb)
    xor = rows ^ cols
    # i ^ j < b  <=>  i and j lie in the same b-aligned diagonal group, so the XOR test on the
    # global indices is the tiled per-group pattern (all strides 2^t < b stay inside a group).
    layout = xor == 0
    for t in range(n_factors):
        layout |= xor == (1 << t)
    if global_size:
        layout |= (rows < global_size) | (cols < global_size)
    return layout


def local_layout(seqlen, block, window):
    """Banded layout, (nb, nb) bool: blocks with |i - j| <= window (window in blocks, >= 0)."""
    nb = num_blocks(seqlen, block)
    _check_int("window", window, 0)
    rows, cols = _index_grid(nb)
    return (rows - cols).abs() <= window


def global_layout(seqlen, block, global_size):
    """The first `global_size` block rows and block columns dense, (nb, nb) bool."""
    nb = num_blocks(seqlen, block)
    _check_int("global_size", global_size, 0)
    rows, cols = _index_grid(nb)
    return (rows < global_size) | (cols < global_size)


def random_layout(seqlen, block, n_random, seed, exclude=None):
    """`n_random` key blocks per query block row drawn without replacement (seeded: the same
    seed gives the same blocks), (nb, nb) bool; blocks set in `exclude` are never drawn (a row
    with fewer free blocks gets them all)."""
    nb = num_blocks(seqlen, block)
    _check_int("n_random", n_random, 0)
    _check_int("seed", seed, 0)
    score = torch.rand(nb, nb, generator=torch.Generator().manual_seed(seed))
    if exclude is not None:
        score = score.masked_fill(_check_layout(exclude, "exclude"), -1.0)
    top = score.topk(min(n_random, nb), dim=1)
    layout = torch.zeros(nb, nb, dtype=torch.bool)
    layout.scatter_(1, top.indices, top.values >= 0)
    return layout


def fixed_layout(seqlen, block, stride, summary_size=1):
    """Sparse Transformer "fixed" pattern in blocks, (nb, nb) bool: block j is visible from block
    i when both lie in the same chunk of `stride` blocks, or j is one of the last `summary_size`
    blocks of its chunk (the summary columns every row reads)."""
    nb = num_blocks(seqlen, block)
    _check_int("stride", stride, 1)
    _check_int("summary_size", summary_size, 1)
    if summary_size > stride:
        raise ValueError(f"summary_size must be <= stride ({stride}), got {summary_size}")
    rows, cols = _index_grid(nb)
    return (rows // stride == cols // stride) | (cols % stride >= stride - summary_size)


def strided_layout(seqlen, block, stride):
    """Sparse Transformer "strided" pattern in blocks, (nb, nb) bool: blocks less than `stride`
    apart, and blocks a multiple of `stride` apart."""
    nb = num_blocks(seqlen, block)
    _check_int("stride", stride, 1)
    rows, cols = _index_grid(nb)
    gap = (rows - cols).abs()
    return (gap < stride) | (gap % stride == 0)


def _check_layout(layout, name="layout"):
    if not isinstance(layout, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(layout).__name__}")
    if layout.dim() != 2:
        raise ValueError(f"{name} must be 2-D (nb_q, nb_k), got shape {tuple(layout.shape)}")
    if layout.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, got {layout.dtype}")
    return layout


def causal_layout(layout):
    """Intersect a layout with the lower block triangle (block column j <= block row i).

    Blocks are aligned at the top left (query block i and key block i cover the same tokens), as
    for self-attention; the diagonal blocks stay and need the token-level causal mask inside.
    """
    return torch.tril(_check_layout(layout))


def _combine(op, layouts):
    if not layouts:
        raise ValueError("need at least one layout")
    for n, layout in enumerate(layouts):
        _check_layout(layout, f"layouts[{n}]")
        if layout.shape != layouts[0].shape:
            raise ValueError(f"layouts[{n}] has shape {tuple(layout.shape)}, "
                             f"expected {tuple(layouts[0].shape)} like layouts[0]")
    out = layouts[0].clone()
    for layout in layouts[1:]:
        out = op(out, layout.to(out.device))
    return out


def layout_union(*layouts):
    """Blocks nonzero in any of the layouts (all of one shape)."""
    return _combine(torch.logical_or, layouts)


def layout_intersection(*layouts):
    """Blocks nonzero in every one of the layouts (all of one shape)."""
    return _combine(torch.logical_and, layouts)


def density(layout):
    """Fraction of nonzero blocks, a float in [0, 1]."""
    _check_layout(layout)
    return layout.sum().item() / max(layout.numel(), 1)


def density_report(layout):
    """nnz, total, density and the per-row / per-column nonzero-block extremes of a layout."""
    _check_layout(layout)
    row = layout.sum(dim=1)
    col = layout.sum(dim=0)
    nnz = int(row.sum().item())
    total = layout.numel()
    return {
        "shape": list(layout.shape),
        "nnz": nnz,
        "total": total,
        "density": nnz / max(total, 1),
        "row_nnz_min": int(row.min().item()) if row.numel() else 0,
        "row_nnz_max": int(row.max().item()) if row.numel() else 0,
        "col_nnz_min": int(col.min().item()) if col.numel() else 0,
        "col_nnz_max": int(col.max().item()) if col.numel() else 0,
        "empty_rows": int((row == 0).sum().item()),
    }


# LayoutSpec.layout -> the LayoutSpec fields that pattern reads besides block_size,
# local_window and global_size (which every pattern may add)
LAYOUT_KINDS = {
    "butterfly": ("butterfly_size", "n_factors"),
    "longformer": (),
    "bigbird": ("random_blocks", "random_seed"),
    "fixed": ("stride", "summary_size"),
    "strided": ("stride",),
}


@dataclass(frozen=True)
class LayoutSpec:
    """A block-sparse layout pattern, named by its parameters (the keys of
    configs/attention/blocksparse.yaml): one place turns them into a layout for the model, the
    benchmarks, the tuning tools and the probes.

    layout: the pattern, one of LAYOUT_KINDS (butterfly, longformer, bigbird, fixed, strided).
    block_size: tokens per block side. butterfly_size: size of the diagonal butterfly groups in
    blocks (None: all blocks). n_factors: XOR factors (None: log2(butterfly_size)). global_size:
    dense leading block rows and columns. local_window: an extra sliding window of that many
    blocks each side (0: none). random_blocks, random_seed (bigbird): random key blocks per query
    block row and the seed drawing them. stride (fixed, strided): the pattern's period in blocks;
    summary_size (fixed): summary blocks at the end of each period.
    """

    block_size: int = 128
    butterfly_size: Optional[int] = None
    n_factors: Optional[int] = None
    global_size: int = 0
    local_window: int = 0
    layout: str = "butterfly"
    random_blocks: int = 0
    random_seed: int = 0
    stride: Optional[int] = None
    summary_size: int = 1

    def __post_init__(self):
        _check_int("block_size", self.block_size, 1)
        if self.butterfly_size is not None:
            _check_butterfly_size(self.butterfly_size)
        for name in ("n_factors", "stride"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 0 if name == "n_factors" else 1)
        for name in ("global_size", "local_window", "random_blocks", "random_seed"):
            _check_int(name, getattr(self, name), 0)
        _check_int("summary_size", self.summary_size, 1)
        if self.layout not in LAYOUT_KINDS:
            raise ValueError(f"layout must be one of {sorted(LAYOUT_KINDS)}, got {self.layout!r}")
        default = LayoutSpec.__dataclass_fields__
        for name in dict.fromkeys(n for names in LAYOUT_KINDS.values() for n in names):
            if name not in LAYOUT_KINDS[self.layout] and getattr(self, name) != default[name].default:
                users = [kind for kind, names in LAYOUT_KINDS.items() if name in names]
                raise ValueError(f"{name} applies to layout={'/'.join(users)} only, not "
                                 f"layout={self.layout} (leave it at {default[name].default})")
        if self.layout in ("fixed", "strided") and self.stride is None:
            raise ValueError(f"layout={self.layout} needs stride (its period in blocks, >= 1)")

    @classmethod
    def from_config(cls, config):
        """The spec from a mapping holding (some of) its fields; other keys are left alone."""
        return cls(**{f.name: config[f.name] for f in fields(cls) if f.name in config})

    def pattern(self, seqlen):
        """(nb, nb) bool layout of the pattern alone (without the local band and global blocks)."""
        if self.layout == "butterfly":
            return butterfly_layout(seqlen, self.block_size, butterfly_size=self.butterfly_size,
                                    n_factors=self.n_factors)
        if self.layout == "fixed":
            return fixed_layout(seqlen, self.block_size, self.stride, self.summary_size)
        if self.layout == "strided":
            return strided_layout(seqlen, self.block_size, self.stride)
        return local_layout(seqlen, self.block_size, 0)  # longformer, bigbird: the diagonal

    def build(self, seqlen, causal=False):
        """(nb, nb) bool layout for `seqlen` tokens: the pattern joined with the local band
        (local_window > 0), the global blocks and (bigbird) the random blocks, cut to the lower
        block triangle when causal."""
        layout = layout_union(self.pattern(seqlen),
                              local_layout(seqlen, self.block_size, self.local_window),
                              global_layout(seqlen, self.block_size, self.global_size))
        if self.random_blocks:
            layout |= random_layout(seqlen, self.block_size, self.random_blocks, self.random_seed,
                                    exclude=layout)
        return causal_layout(layout) if causal else layout

    def label(self):
        """Short text naming the parameters that differ from the defaults (for tables)."""
        default = LayoutSpec()
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if getattr(self, f.name) != getattr(default, f.name)]
        return ",".join(parts) or "butterfly"
