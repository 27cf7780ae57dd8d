"""Checks of flash_attn_with_kvcache's arguments: one clear error naming the argument.

Shapes, dtypes, window, splits and the tree are checked on the host without touching the device;
the values of cache_seqlens and block_table need one device sync (`check_cache_contents`), which
is skipped while a CUDA graph is being captured.
"""
import torch

from kernels.attention_inputs import _check_tensor

MAX_DECODE_HEAD_DIM = 256
_Q_LAYOUT = "(batch, seqlen_q, heads, head_dim)"
_CACHE_LAYOUT = "(batch, capacity, heads_kv, head_dim)"
_PAGED_LAYOUT = "(num_blocks, page_size, heads_kv, head_dim) with block_table"
_NEW_LAYOUT = "(batch, seqlen_new, heads_kv, head_dim)"


def _check_like(name, x, q):
    if x.dtype != q.dtype:
        raise TypeError(f"{name} has dtype {x.dtype}, q has {q.dtype}; they must match")
    if x.device != q.device:
        raise ValueError(f"{name} is on {x.device}, q on {q.device}; they must be on one device")


def check_decode_tensors(q, k_cache, v_cache, k, v, block_table):
    """Validate the tensors of a call; returns the cache capacity (tokens per batch element)."""
    _check_tensor("q", q, 4, _Q_LAYOUT)
    layout = _CACHE_LAYOUT if block_table is None else _PAGED_LAYOUT
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_tensor(name, x, 4, layout)
        _check_like(name, x, q)
        if x.stride(-1) != 1:
            raise ValueError(f"{name} must have a unit last stride (it is read and written in "
                             f"place), got strides {x.stride()}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    batch, n_q, heads, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    if n_q < 1:
        raise ValueError("q must hold at least one query (seqlen_q >= 1)")
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"head_dim of k_cache ({k_cache.shape[3]}) differs from q ({head_dim})")
    if not 1 <= head_dim <= MAX_DECODE_HEAD_DIM:
        raise ValueError(f"head_dim {head_dim} is not supported; use 1 <= head_dim <= "
                         f"{MAX_DECODE_HEAD_DIM}")
    if heads % heads_kv:
        raise ValueError(f"q heads ({heads}) must be a multiple of k_cache heads ({heads_kv})")
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (or both left None)")
    if k is not None:
        for name, x in (("k", k), ("v", v)):
            _check_tensor(name, x, 4, _NEW_LAYOUT)
            _check_like(name, x, q)
            if x.shape[0] != batch or x.shape[2:] != k_cache.shape[2:]:
                raise ValueError(f"{name} must have shape (batch, seqlen_new, heads_kv, head_dim)"
                                 f" = ({batch}, *, {heads_kv}, {head_dim}), got {tuple(x.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and "
                             f"{tuple(v.shape)}")
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache batch ({k_cache.shape[0]}) differs from q ({batch}); "
                             "pass block_table for a paged cache")
        return k_cache.shape[1]
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 \
            or block_table.shape[0] != batch:
        raise ValueError(f"block_table must be a (batch={batch}, max_blocks) tensor, got "
                         f"{getattr(block_table, 'shape', type(block_table).__name__)}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must be int32, got {block_table.dtype}")
    if block_table.device != q.device:
        raise ValueError(f"block_table is on {block_table.device}, q on {q.device}")
    return block_table.shape[1] * k_cache.shape[1]


def check_window(window_size):
    """(left, right) of a window_size pair of ints >= -1 (-1: unbounded)."""
    try:
        left, right = (int(w) for w in window_size)
        valid = all(int(w) == w for w in window_size)
    except (TypeError, ValueError):
        valid = False
    if not valid or left < -1 or right < -1:
        raise ValueError(f"window_size must be a pair (left, right) of ints >= -1 (-1 = "
                         f"unbounded), got {window_size!r}")
    return left, right


def check_num_splits(num_splits):
    """num_splits as an int >= 0 (0: chosen by the kernel's rule)."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits must be an int >= 0 (0 = automatic, 1 = no split), got "
                         f"{num_splits!r}")
    return num_splits


TILE_KEYS = ("BLOCK_N", "num_warps", "num_stages")


def check_tiles(tiles):
    """tiles (a tile sweep's override of the decode kernel's launch config) as a dict of
    TILE_KEYS: BLOCK_N a power of 2 in [16, 256], num_warps in 1..16 a power of 2, num_stages in
    [1, 8]; None stays None."""
    if tiles is None:
        return None
    if not isinstance(tiles, dict) or not set(tiles) <= set(TILE_KEYS):
        raise ValueError(f"tiles must be None or a dict with keys among {', '.join(TILE_KEYS)}, "
                         f"got {tiles!r}")
    ranges = {"BLOCK_N": (16, 256, True), "num_warps": (1, 16, True), "num_stages": (1, 8, False)}
    for key, value in tiles.items():
        low, high, power_of_2 = ranges[key]
        if (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
                or (power_of_2 and value & (value - 1))):
            kind = "a power of 2 " if power_of_2 else "an int "
            raise ValueError(f"tiles[{key!r}] must be {kind}in [{low}, {high}], got {value!r}")
    return dict(tiles)


def tree_ancestors(tree_parents, n_q, n_new, device):
    """(n_q, n_q) uint8 matrix, [i, j] = 1 where draft token j is token i or an ancestor of it,
    from parents (parents[i] < i, -1 for a root)."""
    if n_new and n_new != n_q:
        raise ValueError(f"tree_parents: the k/v given must be those of the {n_q} tree tokens "
                         f"(seqlen_new = seqlen_q), got seqlen_new {n_new}")
    parents = tree_parents.tolist() if isinstance(tree_parents, torch.Tensor) else tree_parents
    try:
        parents = list(parents)
    except TypeError:
        parents = None
    if parents is None or len(parents) != n_q:
        raise ValueError(f"tree_parents must hold one parent per query (seqlen_q = {n_q}), got "
                         f"{tree_parents!r}")
    ancestors = torch.eye(n_q, dtype=torch.uint8)
    for i, p in enumerate(parents):
        if isinstance(p, bool) or not isinstance(p, int) or not -1 <= p < i:
            raise ValueError(f"tree_parents[{i}] = {p!r} must be an int in [-1, {i - 1}] "
                             "(an earlier token, or -1 for a root)")
        if p >= 0:
            ancestors[i] |= ancestors[p]
    return ancestors.to(device)


def _length_error(name, total, n_new, min_length, capacity):
    return ValueError(f"{name} is out of range: it makes {total} attended tokens (cache_seqlens + "
                      f"{n_new} new), which must be in [{min_length}, {capacity}] (the capacity "
                      "of the cache; the minimum is the number of new or tree tokens)")


def check_cache_seqlens(cache_seqlens, batch, n_new, min_length, capacity, device):
    """(per_batch, cache_len, longest): the int32 (batch,) tensor of cached tokens or None, the
    count shared by the batch when it is an int (else 0), and the longest attended length
    (cache_seqlens + n_new) when known without reading the device (else None)."""
    if cache_seqlens is None:
        cache_seqlens = capacity
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        total = cache_seqlens + n_new
        if cache_seqlens < 0 or not min_length <= total <= capacity:
            raise _length_error(f"cache_seqlens {cache_seqlens}", total, n_new, min_length,
                                capacity)
        return None, cache_seqlens, total
    if not isinstance(cache_seqlens, torch.Tensor) or tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(f"cache_seqlens must be an int or a (batch={batch},) int32 tensor, got "
                         f"{getattr(cache_seqlens, 'shape', type(cache_seqlens).__name__)}")
    if cache_seqlens.dtype != torch.int32:
        raise TypeError(f"cache_seqlens must be int32, got {cache_seqlens.dtype}")
    if cache_seqlens.device != device:
        raise ValueError(f"cache_seqlens is on {cache_seqlens.device}, q on {device}")
    return cache_seqlens, 0, None


def check_cache_contents(lengths, n_new, min_length, capacity, block_table, page_size,
                         num_blocks):
    """Check the attended lengths (an int32 (batch,) tensor, within [max(min_length, n_new),
    capacity]) and the block_table entries they use (within [0, num_blocks)) with one device
    sync; returns the longest length. While a CUDA graph is captured nothing is read and the
    capacity is returned."""
    if lengths.is_cuda and torch.cuda.is_current_stream_capturing():
        return capacity
    bad_length = (lengths < max(min_length, n_new)) | (lengths > capacity)
    bad_page = torch.zeros_like(bad_length)
    if block_table is not None:
        pages_used = (lengths + page_size - 1) // page_size
        used = torch.arange(block_table.shape[1], device=lengths.device) < pages_used[:, None]
        bad_page = (used & ((block_table < 0) | (block_table >= num_blocks))).any(1)
    found = torch.stack([bad_length.int().argmax(), bad_length.any().int(),
                         bad_page.int().argmax(), bad_page.any().int(), lengths.max()]).tolist()
    b_len, any_len, b_page, any_page, longest = found
    if any_len:
        raise _length_error(f"cache_seqlens[{b_len}] = {int(lengths[b_len]) - n_new}",
                            int(lengths[b_len]), n_new, min_length, capacity)
    if any_page:
        raise ValueError(f"block_table[{b_page}] lists a page outside [0, {num_blocks}) among "
                         "the pages its tokens use")
    return longest
