"""Attention over a KV cache for autoregressive decoding (FlashDecoding), with GQA, paged caches,
sliding windows and draft-token trees: `flash_attn_with_kvcache`.

The layers beneath: kernels/decode_inputs.py (argument checks) and kernels/decode_kernels.py (the
split-KV kernel and the kernel merging its splits). Inference only: no gradients.

Split rule (num_splits=0). A call has programs = batch x heads_kv x row blocks (row blocks: the
query x group rows in tiles of 16 to 64, one for plain decoding). When that fills the GPU
(programs >= SMs) the key range is not split. Otherwise it is split into
min(ceil(2 * SMs / programs), ceil(longest / 256), 64) ranges: about two programs per SM, each
range at least 256 keys (below that the merge costs more than the parallelism gains). Ranges are
whole key tiles, so the count may shrink to ceil(longest / range); each sequence's own keys are
cut into that many ranges, so short sequences beside long ones are split as finely.

Tiles: `decode_config`. The `tiles` keyword replaces them for tile sweeps
(research/kernel_probes/tune_decode.py), and `launch_plan` says what a call will launch.
"""
import functools

import torch

from kernels.attention_inputs import resolve_scale
from kernels.attention_launch import LOG2E, block_d_for, cdiv, launch_kernel
from kernels.decode_inputs import (check_cache_contents, check_cache_seqlens, check_decode_tensors,
                                   check_num_splits, check_tiles, check_window,
                                   tree_ancestors)
from kernels.decode_kernels import combine_splits_kernel, decode_kernel
from kernels.torch_ops import interpreting

MIN_KEYS_PER_SPLIT = 256
MAX_AUTO_SPLITS = 64
INTERPRETER_SMS = 8  # the SM count the split rule assumes under the CPU interpreter


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), num_splits=0,
                            block_table=None, tree_parents=None, tiles=None):
    """Attention of new queries over a KV cache; returns out (B, Nq, Hq, d) in q's dtype.

    q: (B, Nq, Hq, d). k_cache, v_cache: (B, capacity, Hkv, d), or with block_table (B,
    max_blocks) int32 a paged cache (num_blocks, page_size, Hkv, d) whose token j of sequence b
    is row j % page_size of page block_table[b, j // page_size] (capacity = max_blocks *
    page_size). Hq % Hkv == 0 (GQA); fp16, bf16 or fp32 (products in TF32 on GPUs), float32
    accumulation; head_dim up to 256.
    cache_seqlens: int or int32 (B,) tensor, tokens already in the cache (None: the capacity).
    k, v: optional (B, Nnew, Hkv, d), written into the caches IN PLACE at positions
    cache_seqlens[b] .. cache_seqlens[b] + Nnew - 1 before attending. Sequence b then attends to
    its first L_b = cache_seqlens[b] + Nnew tokens, and query i sits at position
    p_i = L_b - Nq + i (the queries are the last Nq tokens, bottom-right aligned).
    Query i sees key j < L_b when every mask given allows it:
      causal: j <= p_i;
      window_size (left, right), -1 = unbounded: p_i - left <= j <= p_i + right;
      tree_parents: Nq ints, parents[i] < i, -1 for a root (a list, or a tensor shared by the
        batch). The last Nq tokens are a tree of draft tokens (token t at position L_b - Nq + t,
        normally the k/v of this call, then Nnew = Nq) and query i sees the earlier cache tokens
        and, among the draft tokens, only itself and its ancestors: the mask with which
        speculative decoding verifies a tree of drafts in one pass. A chain (parents[i] = i - 1)
        is the causal mask.
    Rows that see no key give zeros. num_splits: key-range splits (FlashDecoding); 0 picks them
    by the rule in this module's docstring, 1 means no split. The values of a cache_seqlens
    tensor and of block_table are checked with one device sync, except while a CUDA graph is
    being captured; tree_parents is read on the host.
    tiles: for tile sweeps only, a dict with any of BLOCK_N, num_warps, num_stages replacing the
    kernel's own choice (`decode_config`); the split count is then rounded to the new BLOCK_N.
    """
    capacity = check_decode_tensors(q, k_cache, v_cache, k, v, block_table)
    if torch.is_grad_enabled() and q.requires_grad:
        raise ValueError("flash_attn_with_kvcache has no backward pass: q requires grad (call "
                         "it under torch.no_grad())")
    left, right = check_window(window_size)
    num_splits = check_num_splits(num_splits)
    tiles = check_tiles(tiles)
    batch, n_q = q.shape[:2]
    n_new = 0 if k is None else k.shape[1]
    ancestors = None
    if tree_parents is not None:
        ancestors = tree_ancestors(tree_parents, n_q, n_new, q.device)
    min_length = n_q if ancestors is not None else n_new
    per_batch, cache_len, longest = check_cache_seqlens(cache_seqlens, batch, n_new, min_length,
                                                        capacity, q.device)
    if per_batch is not None or block_table is not None:
        lengths = (per_batch + n_new if per_batch is not None
                   else torch.full((batch,), cache_len + n_new, dtype=torch.int32,
                                   device=q.device))
        longest = check_cache_contents(lengths, n_new, min_length, capacity, block_table,
                                       k_cache.shape[1], k_cache.shape[0])
    q, k, v = (x if x is None or x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    return _attend(q, k_cache, v_cache, k, v, per_batch, cache_len, longest,
                   resolve_scale(softmax_scale, q.shape[-1]), bool(causal), left, right,
                   num_splits, block_table, ancestors, tiles)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device):
    """Streaming multiprocessors of `device` (INTERPRETER_SMS off CUDA)."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def split_count(num_splits, programs, longest, block_n, sms):
    """Splits of the key range for a call whose longest sequence attends `longest` keys (an upper
    bound will do), by the rule in the module docstring when num_splits is 0. The kernel cuts each
    sequence's own keys into that many ranges of whole tiles."""
    if num_splits == 0:
        num_splits = 1
        if programs < sms:
            num_splits = max(1, min(cdiv(2 * sms, programs), cdiv(longest, MIN_KEYS_PER_SPLIT),
                                    MAX_AUTO_SPLITS))
    longest = max(longest, 1)
    return cdiv(longest, cdiv(cdiv(longest, num_splits), block_n) * block_n)


def decode_config(block_d, rows):
    """Tiles of the decode kernel: BLOCK_M rows of (query, head-in-group), BLOCK_N keys."""
    block_m = min(max(16, 1 << (rows - 1).bit_length()), 64 if block_d <= 128 else 32)
    if interpreting():
        return dict(BLOCK_M=block_m, BLOCK_N=16, num_warps=4, num_stages=1)
    if block_d > 128:
        return dict(BLOCK_M=block_m, BLOCK_N=32, num_warps=4, num_stages=2)
    return dict(BLOCK_M=block_m, BLOCK_N=64, num_warps=4, num_stages=3)


def launch_plan(q_shape, heads_kv, longest, device, num_splits=0, tiles=None):
    """(config, row blocks, splits) of a call with q of shape q_shape (B, Nq, Hq, d) over
    heads_kv K/V heads whose longest sequence attends `longest` keys, on `device`: the launch
    config (decode_config, updated by `tiles`) and the decode kernel's grid."""
    batch, n_q, heads, head_dim = q_shape
    rows = n_q * (heads // heads_kv)
    config = decode_config(block_d_for(head_dim), rows) | (tiles or {})
    row_blocks = cdiv(rows, config["BLOCK_M"])
    splits = split_count(num_splits, batch * heads_kv * row_blocks, longest, config["BLOCK_N"],
                         sm_count(device))
    return config, row_blocks, splits


def _attend(q, k_cache, v_cache, k, v, per_batch, cache_len, longest, scale, causal, left, right,
            num_splits, block_table, ancestors, tiles):
    batch, n_q, heads, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    group = heads // heads_kv
    block_d = block_d_for(head_dim)
    config, row_blocks, splits = launch_plan(q.shape, heads_kv, longest, q.device, num_splits,
                                             tiles)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    n_rows = batch * n_q * heads
    o_part = lse_part = None
    if splits > 1:
        o_part = torch.empty(splits, *q.shape, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(splits, batch, n_q, heads, dtype=torch.float32, device=q.device)
    paged = block_table is not None
    append = k is not None
    new_strides = (*k.stride()[:3], *v.stride()[:3]) if append else (0,) * 6
    args = (q, k_cache, v_cache, k, v, out, o_part, lse_part, per_batch, block_table, ancestors,
            *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], *new_strides,
            *out.stride()[:3], block_table.stride(0) if paged else 0,
            n_q, k.shape[1] if append else 0, cache_len, heads_kv, n_rows,
            k_cache.shape[1] if paged else 0, left, right, scale * LOG2E)
    launch_kernel(decode_kernel, (splits, row_blocks, batch * heads_kv), args, config,
                  HEAD_DIM=head_dim, BLOCK_D=block_d, GROUP=group, IS_CAUSAL=causal,
                  WINDOW=left >= 0 or right >= 0, HAS_TREE=ancestors is not None, PAGED=paged,
                  APPEND=append, SPLIT=splits > 1)
    if splits > 1:
        combine_splits_kernel[(n_rows,)](o_part, lse_part, out, splits, n_rows,
                                         HEAD_DIM=head_dim, BLOCK_D=block_d,
                                         BLOCK_S=min(32, 1 << (splits - 1).bit_length()))
    return out
