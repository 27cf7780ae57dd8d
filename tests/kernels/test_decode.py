"""flash_attn_with_kvcache against its float64 reference, under the Triton interpreter on CPU;
and its kernels compiled for sm_90 (no GPU needed)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import decode, flash_attn_with_kvcache, reference_attention_with_kvcache
from tests.kernels.helpers import rel_err

REPO = Path(__file__).resolve().parents[2]
TOL32 = 1e-5  # float32 inputs: interpreter dots are exact float32
BAND16 = 2e-3  # float16 (the interpreter's bfloat16 dots are wrong; bf16 runs in the GPU tests)


def _cache(batch, capacity, heads_kv, head_dim, dtype=torch.float32):
    return (torch.randn(batch, capacity, heads_kv, head_dim, dtype=dtype),
            torch.randn(batch, capacity, heads_kv, head_dim, dtype=dtype))


def _paged(k_cache, v_cache, page_size, spare=3):
    """The same caches as pages of `page_size` tokens in shuffled order (plus unused pages)."""
    batch, capacity = k_cache.shape[:2]
    per_seq = -(-capacity // page_size)
    order = torch.randperm(batch * per_seq + spare)
    table = order[:batch * per_seq].view(batch, per_seq).to(torch.int32)
    pages_k = torch.randn(batch * per_seq + spare, page_size, *k_cache.shape[2:],
                          dtype=k_cache.dtype)
    pages_v = torch.randn_like(pages_k)
    for b in range(batch):
        for j in range(per_seq):
            rows = slice(j * page_size, min((j + 1) * page_size, capacity))
            n = rows.stop - rows.start
            pages_k[table[b, j], :n] = k_cache[b, rows]
            pages_v[table[b, j], :n] = v_cache[b, rows]
    return pages_k, pages_v, table


def _run(q, k_cache, v_cache, tol=TOL32, **kwargs):
    """Kernel output on copies of the caches, checked against the reference; returns the
    output and the caches as the kernel left them."""
    kc, vc = k_cache.clone(), v_cache.clone()
    out = flash_attn_with_kvcache(q, kc, vc, **kwargs)
    kwargs.pop("num_splits", None)
    kwargs.pop("tiles", None)
    ref = reference_attention_with_kvcache(q, k_cache, v_cache, **kwargs)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "output has NaN/inf"
    assert rel_err(out, ref) < tol, f"rel err {rel_err(out, ref):.2e}"
    return out, kc, vc


@pytest.mark.parametrize("cache_len", [1, 17, 1000])
@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_decode_step_matches_reference(cache_len, group, num_splits):
    """One new token per sequence appended then attended, uneven lengths, GQA, splits."""
    torch.manual_seed(cache_len * 10 + group + num_splits)
    batch, heads_kv, head_dim, capacity = 2, 2, 32, cache_len + 3
    q = torch.randn(batch, 1, heads_kv * group, head_dim)
    k_cache, v_cache = _cache(batch, capacity, heads_kv, head_dim)
    k, v = torch.randn(2, batch, 1, heads_kv, head_dim)
    lens = torch.tensor([cache_len - 1, max(cache_len // 2 - 1, 0)], dtype=torch.int32)
    _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, num_splits=num_splits)


@pytest.mark.parametrize("num_splits", [1, 2, 7, 64])
def test_many_splits_and_empty_splits(num_splits):
    """Splits past a sequence's end (short sequence beside a long one) add nothing."""
    torch.manual_seed(num_splits)
    q = torch.randn(3, 1, 4, 16)
    k_cache, v_cache = _cache(3, 300, 2, 16)
    lens = torch.tensor([300, 5, 0], dtype=torch.int32)
    out, _, _ = _run(q, k_cache, v_cache, cache_seqlens=lens, num_splits=num_splits)
    assert torch.equal(out[2], torch.zeros_like(out[2]))  # no key at all: zeros


@pytest.mark.parametrize("head_dim", [16, 24, 64, 80, 128, 256])
def test_head_dims(head_dim):
    torch.manual_seed(head_dim)
    q = torch.randn(1, 2, 2, head_dim)
    k_cache, v_cache = _cache(1, 40, 1, head_dim)
    _run(q, k_cache, v_cache, cache_seqlens=37, causal=True, num_splits=2)


def test_half_precision():
    torch.manual_seed(3)
    dtype = torch.float16
    q = torch.randn(2, 1, 8, 64, dtype=dtype)
    k_cache, v_cache = _cache(2, 1000, 2, 64, dtype)
    k, v = torch.randn(2, 2, 1, 2, 64, dtype=dtype)
    _run(q, k_cache, v_cache, tol=BAND16, k=k, v=v, cache_seqlens=990, num_splits=0)


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_causal_multi_token(group, num_splits):
    """Several new tokens at once (speculative verification / chunked prefill): causal,
    bottom-right aligned, with per-sequence cache lengths."""
    torch.manual_seed(group + num_splits)
    n_new, heads_kv = 5, 2
    q = torch.randn(2, n_new, heads_kv * group, 32)
    k_cache, v_cache = _cache(2, 60, heads_kv, 32)
    k, v = torch.randn(2, 2, n_new, heads_kv, 32)
    lens = torch.tensor([50, 9], dtype=torch.int32)
    _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, causal=True, num_splits=num_splits)


def test_many_rows_span_row_blocks():
    """More (query, head-in-group) rows than one tile: several row blocks, the new tokens
    appended once (by row block 0 of each split)."""
    torch.manual_seed(5)
    q = torch.randn(1, 40, 8, 16)
    k_cache, v_cache = _cache(1, 90, 2, 16)
    k, v = torch.randn(2, 1, 40, 2, 16)
    _, kc, vc = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=45, causal=True, num_splits=3)
    assert torch.equal(kc[:, 45:85], k) and torch.equal(vc[:, 45:85], v)
    assert torch.equal(kc[:, :45], k_cache[:, :45]) and torch.equal(kc[:, 85:], k_cache[:, 85:])


@pytest.mark.parametrize("causal,window", [(True, (3, -1)), (False, (4, 2)), (False, (0, 0)),
                                           (True, (-1, 5)), (False, (-1, 1))])
def test_sliding_window(causal, window):
    torch.manual_seed(sum(window) + causal)
    q = torch.randn(2, 3, 4, 32)
    k_cache, v_cache = _cache(2, 70, 2, 32)
    lens = torch.tensor([70, 20], dtype=torch.int32)
    _run(q, k_cache, v_cache, cache_seqlens=lens, causal=causal, window_size=window,
         num_splits=3)


@pytest.mark.parametrize("page_size", [16, 5])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_paged_cache_and_append(page_size, num_splits):
    """A paged cache gives what the contiguous one gives, the new tokens cross a page boundary
    and land in the right pages, and nothing else in the pages changes."""
    torch.manual_seed(page_size + num_splits)
    batch, heads_kv, head_dim, capacity, n_new = 2, 2, 16, 48, 3
    k_cache, v_cache = _cache(batch, capacity, heads_kv, head_dim)
    pages_k, pages_v, table = _paged(k_cache, v_cache, page_size)
    q = torch.randn(batch, n_new, 4, head_dim)
    k, v = torch.randn(2, batch, n_new, heads_kv, head_dim)
    lens = torch.tensor([page_size - 1, 30], dtype=torch.int32)
    out, kp, vp = _run(q, pages_k, pages_v, k=k, v=v, cache_seqlens=lens, causal=True,
                       block_table=table, num_splits=num_splits)
    flat, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, causal=True)
    assert rel_err(out, flat) < TOL32
    expected_k, expected_v = pages_k.clone(), pages_v.clone()
    for b in range(batch):
        for t in range(n_new):
            pos = int(lens[b]) + t
            page = table[b, pos // page_size]
            expected_k[page, pos % page_size] = k[b, t]
            expected_v[page, pos % page_size] = v[b, t]
    assert torch.equal(kp, expected_k) and torch.equal(vp, expected_v)


def test_append_writes_in_place():
    torch.manual_seed(11)
    k_cache, v_cache = _cache(2, 20, 2, 16)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    k, v = torch.randn(2, 2, 3, 4, 16)[:, :, :, ::2]  # strided views (head stride 2 * d)
    lens = torch.tensor([4, 17], dtype=torch.int32)
    flash_attn_with_kvcache(torch.randn(2, 1, 2, 16), k_cache, v_cache, k, v, cache_seqlens=lens)
    for b, start in enumerate(lens.tolist()):
        new = slice(start, start + 3)
        assert torch.equal(k_cache[b, new], k[b]) and torch.equal(v_cache[b, new], v[b])
        before_k[b, new], before_v[b, new] = k[b], v[b]
    assert torch.equal(k_cache, before_k) and torch.equal(v_cache, before_v)


def test_caches_as_views_of_one_kv_tensor():
    """k_cache and v_cache may be strided views (here of one (B, capacity, 2, Hkv, d) tensor)."""
    torch.manual_seed(12)
    kv = torch.randn(2, 30, 2, 2, 16)
    q = torch.randn(2, 2, 4, 16)
    k, v = torch.randn(2, 2, 2, 2, 16)
    lens = torch.tensor([10, 27], dtype=torch.int32)
    expected = kv.clone()
    out = flash_attn_with_kvcache(q, kv[:, :, 0], kv[:, :, 1], k, v, cache_seqlens=lens,
                                  causal=True, num_splits=2)
    ref = reference_attention_with_kvcache(q, expected[:, :, 0], expected[:, :, 1], k, v,
                                           cache_seqlens=lens, causal=True)
    assert rel_err(out, ref) < TOL32
    for b, start in enumerate(lens.tolist()):
        expected[b, start:start + 2, 0], expected[b, start:start + 2, 1] = k[b], v[b]
    assert torch.equal(kv, expected)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_chain_tree_is_causal(num_splits):
    torch.manual_seed(num_splits)
    n = 6
    q = torch.randn(2, n, 4, 32)
    k_cache, v_cache = _cache(2, 50, 2, 32)
    k, v = torch.randn(2, 2, n, 2, 32)
    lens = torch.tensor([30, 3], dtype=torch.int32)
    tree, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens,
                      tree_parents=list(range(-1, n - 1)), num_splits=num_splits)
    causal, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, causal=True,
                        num_splits=num_splits)
    assert torch.equal(tree, causal)


@pytest.mark.parametrize("parents", [[-1, 0, 0, 0, 0], [-1, 0, 0, 1, 1, 2, -1, 6],
                                     torch.tensor([-1, -1, 1, 0])])
@pytest.mark.parametrize("group", [1, 2])
def test_tree_masks(parents, group):
    """A star (every draft after the root branches from it), a two-level tree with a second root,
    and a tree given as a tensor; each token sees the cache, itself and its ancestors only."""
    torch.manual_seed(len(parents) + group)
    n = len(parents)
    q = torch.randn(2, n, 2 * group, 16)
    k_cache, v_cache = _cache(2, 40, 2, 16)
    k, v = torch.randn(2, 2, n, 2, 16)
    lens = torch.tensor([25, 0], dtype=torch.int32)
    out, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, tree_parents=parents,
                     num_splits=2)
    # a token's output does not depend on a sibling: change sibling draft 2 (star: 2 is not an
    # ancestor of 1) and token 1's output stays the same
    k2, v2 = k.clone(), v.clone()
    k2[:, 2] += 1.0
    v2[:, 2] += 1.0
    again = flash_attn_with_kvcache(q, k_cache.clone(), v_cache.clone(), k2, v2,
                                    cache_seqlens=lens, tree_parents=parents, num_splits=2)
    assert torch.equal(again[:, 1], out[:, 1])
    assert not torch.equal(again[:, 2], out[:, 2])


def test_no_visible_key_gives_zeros_not_poison(monkeypatch):
    """Outputs and partials come from NaN-filled buffers: every row must be written."""
    real_empty = torch.empty

    def poisoned(*args, **kwargs):
        x = real_empty(*args, **kwargs)
        return x.fill_(float("nan")) if x.is_floating_point() else x
    monkeypatch.setattr(torch, "empty", poisoned)
    torch.manual_seed(2)
    q = torch.randn(2, 2, 4, 16)
    k_cache, v_cache = _cache(2, 64, 2, 16)
    lens = torch.tensor([64, 1], dtype=torch.int32)
    for splits in (1, 5):
        out, _, _ = _run(q, k_cache, v_cache, cache_seqlens=lens, window_size=(0, 0),
                         num_splits=splits)
        assert torch.equal(out[1, 0], torch.zeros_like(out[1, 0]))  # position -1: sees nothing


def test_full_cache_default_and_int_lengths():
    torch.manual_seed(4)
    q = torch.randn(1, 1, 2, 16)
    k_cache, v_cache = _cache(1, 33, 2, 16)
    full, _, _ = _run(q, k_cache, v_cache)
    same = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=33)
    assert torch.equal(full, same)
    _run(q, k_cache, v_cache, cache_seqlens=torch.tensor([12], dtype=torch.int32))


def test_split_rule():
    # batch 1, 8 K/V heads, 16K keys on 132 SMs: ~2 programs per SM, 32 ranges of 512 keys
    assert decode.split_count(0, 8, 16384, 64, 132) == 32
    assert decode.split_count(0, 256, 16384, 64, 132) == 1  # the GPU is already full
    assert decode.split_count(0, 8, 300, 64, 132) == 2  # at least 256 keys per split
    assert decode.split_count(0, 1, 1 << 20, 64, 132) == 64  # at most 64
    assert decode.split_count(5, 4096, 1000, 16, 132) == 5  # an explicit count is kept
    assert decode.split_count(9, 1, 17, 16, 132) == 2  # ... up to one per key tile
    assert decode.split_count(0, 1, 0, 64, 132) == 1  # an empty cache


@pytest.mark.parametrize("tiles,num_splits,splits", [
    (dict(BLOCK_N=32, num_warps=8, num_stages=2), 3, 3),
    (dict(BLOCK_N=64), 1, 1),
    (dict(num_stages=3), 7, 5),  # 7 ranges of 22 keys round up to 5 of two 16-key tiles
])
def test_tile_override_gives_the_default_result(monkeypatch, tiles, num_splits, splits):
    """A sweep's tiles and split count reach the launch and change only fp32 rounding."""
    launched = []
    real = decode.launch_kernel
    monkeypatch.setattr(decode, "launch_kernel", lambda kernel, grid, args, config, **flags: (
        launched.append((grid, config)), real(kernel, grid, args, config, **flags))[1])
    torch.manual_seed(10)
    q = torch.randn(2, 1, 8, 32)
    k_cache, v_cache = _cache(2, 150, 2, 32)
    k, v = torch.randn(2, 2, 1, 2, 32)
    default, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=149)
    swept, _, _ = _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=149, num_splits=num_splits,
                       tiles=tiles)
    torch.testing.assert_close(swept, default, atol=TOL32, rtol=TOL32)
    (grid, config), plan = launched[-1], decode.launch_plan(q.shape, 2, 150, q.device,
                                                            num_splits, tiles)
    assert config == plan[0] and config.items() >= tiles.items()
    assert grid[0] == plan[2] == splits
    assert launched[0][1]["BLOCK_N"] == 16 and launched[0][0][0] == 1  # the default's


def test_launch_plan_follows_the_split_rule():
    config, row_blocks, splits = decode.launch_plan((1, 1, 32, 128), 4, 16384,
                                                    torch.device("cpu"))
    # 4 programs on the interpreter's 8 SMs: about two per SM
    assert (config["BLOCK_M"], config["BLOCK_N"], row_blocks, splits) == (16, 16, 1, 4)
    config, _, splits = decode.launch_plan((1, 3, 32, 128), 8, 1000, torch.device("cpu"), 0,
                                           dict(BLOCK_N=128))
    assert config["BLOCK_N"] == 128 and splits == 1  # 8 programs fill the interpreter's 8 SMs
    assert decode.launch_plan((1, 1, 4, 16), 1, 1000, torch.device("cpu"), 5,
                              dict(BLOCK_N=256))[2] == 4  # one split per 256-key tile at most


def test_splits_for_the_capacity_cover_short_sequences(monkeypatch):
    """Where the lengths are not read (CUDA graph capture) the split count follows the capacity;
    every sequence is then cut into that many ranges of its own length."""
    monkeypatch.setattr(decode, "check_cache_contents", lambda lengths, n_new, min_length,
                        capacity, *args: capacity)
    launched = []
    real = decode.launch_kernel
    monkeypatch.setattr(decode, "launch_kernel", lambda kernel, grid, *args, **kwargs: (
        launched.append(grid), real(kernel, grid, *args, **kwargs))[1])
    torch.manual_seed(9)
    q = torch.randn(2, 1, 4, 16)
    k_cache, v_cache = _cache(2, 600, 2, 16)
    k, v = torch.randn(2, 2, 1, 2, 16)
    _run(q, k_cache, v_cache, k=k, v=v, cache_seqlens=torch.tensor([40, 3], dtype=torch.int32),
         num_splits=0)
    assert launched[0][0] == 3  # 600 keys: 3 ranges of >= 256 for a 40-key and a 4-key sequence


def _bad_call(**overrides):
    torch.manual_seed(0)
    args = dict(q=torch.randn(2, 1, 4, 16), k_cache=torch.randn(2, 10, 2, 16),
                v_cache=torch.randn(2, 10, 2, 16))
    args.update(overrides)
    return flash_attn_with_kvcache(**args)


T = torch.tensor
BAD_INPUTS = [
    (dict(q=torch.randn(2, 4, 16)), ValueError, "q must have 4 dims"),
    (dict(q=torch.randn(2, 1, 3, 16)), ValueError, r"q heads \(3\) must be a multiple"),
    (dict(q=torch.randn(2, 1, 4, 32)), ValueError, r"head_dim of k_cache \(16\) differs"),
    (dict(q=torch.randn(2, 1, 4, 512), k_cache=torch.randn(2, 10, 2, 512),
          v_cache=torch.randn(2, 10, 2, 512)), ValueError, "head_dim 512 is not supported"),
    (dict(q=torch.randn(2, 0, 4, 16)), ValueError, "at least one query"),
    (dict(v_cache=torch.randn(2, 11, 2, 16)), ValueError, "same shape"),
    (dict(k_cache=torch.randn(3, 10, 2, 16), v_cache=torch.randn(3, 10, 2, 16)), ValueError,
     r"k_cache batch \(3\) differs"),
    (dict(k_cache=torch.randn(2, 10, 2, 16).half()), TypeError, "k_cache has dtype"),
    (dict(k_cache=torch.randn(2, 10, 16, 2).transpose(-1, -2)), ValueError, "unit last stride"),
    (dict(k=torch.randn(2, 1, 2, 16)), ValueError, "k and v must be given together"),
    (dict(k=torch.randn(2, 1, 4, 16), v=torch.randn(2, 1, 4, 16)), ValueError,
     r"k must have shape \(batch, seqlen_new, heads_kv, head_dim\)"),
    (dict(k=torch.randn(2, 3, 2, 16), v=torch.randn(2, 3, 2, 16), cache_seqlens=8), ValueError,
     r"cache_seqlens 8 is out of range: it makes 11 attended tokens .* \[3, 10\]"),
    (dict(k=torch.randn(2, 3, 2, 16), v=torch.randn(2, 3, 2, 16),
          cache_seqlens=T([2, 8], dtype=torch.int32)), ValueError,
     r"cache_seqlens\[1\] = 8 is out of range"),
    (dict(cache_seqlens=T([2, -1], dtype=torch.int32)), ValueError, r"cache_seqlens\[1\] = -1"),
    (dict(cache_seqlens=11), ValueError, "cache_seqlens 11 is out of range"),
    (dict(cache_seqlens=T([2, 3])), TypeError, "cache_seqlens must be int32"),
    (dict(cache_seqlens=T([2], dtype=torch.int32)), ValueError, r"\(batch=2,\) int32 tensor"),
    (dict(window_size=(-2, 0)), ValueError, "window_size must be a pair"),
    (dict(window_size=3), ValueError, "window_size must be a pair"),
    (dict(num_splits=-1), ValueError, "num_splits must be an int >= 0"),
    (dict(num_splits=2.0), ValueError, "num_splits must be an int >= 0"),
    (dict(tiles=dict(BLOCK_M=32)), ValueError, "tiles must be None or a dict with keys among"),
    (dict(tiles=(64, 3, 4)), ValueError, "tiles must be None or a dict"),
    (dict(tiles=dict(BLOCK_N=48)), ValueError, r"tiles\['BLOCK_N'\] must be a power of 2 in "
     r"\[16, 256\], got 48"),
    (dict(tiles=dict(num_warps=32)), ValueError, r"tiles\['num_warps'\] must be a power of 2"),
    (dict(tiles=dict(num_stages=0)), ValueError, r"tiles\['num_stages'\] must be an int in "
     r"\[1, 8\], got 0"),
    (dict(block_table=T([[0, 1]], dtype=torch.int32)), ValueError,
     r"block_table must be a \(batch=2, max_blocks\)"),
    (dict(block_table=T([[0, 1], [2, 3]])), TypeError, "block_table must be int32"),
    (dict(block_table=T([[0, 1], [1, 0]], dtype=torch.int32), cache_seqlens=21), ValueError,
     r"cache_seqlens 21 is out of range: .* \[0, 20\]"),
    (dict(block_table=T([[0, 1], [2, 0]], dtype=torch.int32), cache_seqlens=15), ValueError,
     r"block_table\[1\] lists a page outside \[0, 2\)"),
    (dict(q=torch.randn(2, 3, 4, 16), tree_parents=[-1, 0]), ValueError,
     "one parent per query"),
    (dict(q=torch.randn(2, 3, 4, 16), tree_parents=[-1, 0, 2]), ValueError,
     r"tree_parents\[2\] = 2 must be an int in \[-1, 1\]"),
    (dict(q=torch.randn(2, 3, 4, 16), tree_parents=[-1, -2, 0]), ValueError,
     r"tree_parents\[1\] = -2"),
    (dict(q=torch.randn(2, 3, 4, 16), tree_parents=[-1, 0, 1], k=torch.randn(2, 1, 2, 16),
          v=torch.randn(2, 1, 2, 16)), ValueError, "seqlen_new = seqlen_q"),
    (dict(q=torch.randn(2, 3, 4, 16), tree_parents=[-1, 0, 1], cache_seqlens=2), ValueError,
     r"must be in \[3, 10\]"),
    (dict(q=torch.randn(2, 1, 4, 16, requires_grad=True)), ValueError, "no backward pass"),
]


@pytest.mark.parametrize("overrides,error,match", BAD_INPUTS)
def test_bad_input_messages(overrides, error, match):
    with pytest.raises(error, match=match):
        _bad_call(**overrides)


def test_bad_page_beyond_the_used_ones_is_ignored():
    """Unused block_table slots may hold anything (e.g. -1 padding)."""
    torch.manual_seed(8)
    k_cache, v_cache = _cache(2, 16, 2, 16)
    pages_k, pages_v, table = _paged(k_cache, v_cache, 8, spare=0)
    table[:, 1] = -1
    q = torch.randn(2, 1, 4, 16)
    _run(q, pages_k, pages_v, cache_seqlens=8, block_table=table)


# Compiled in a child process without TRITON_INTERPRET (the interpreter replaces the compiler),
# with the signature a launch binds: pointers and strides divisible by 16, absent tensors None,
# and the listed int arguments equal to 1 (Triton makes those constexprs).
COMPILE = """
import json, sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.decode import decode_config
from kernels.decode_kernels import combine_splits_kernel, decode_kernel

TYPES = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "K_NEW": "*bf16", "V_NEW": "*bf16",
         "O": "*bf16", "O_PART": "*fp32", "LSE_PART": "*fp32", "CACHE_SEQLENS": "*i32",
         "TABLE": "*i32", "TREE": "*u8", "qk_scale": "fp32"}

def compile_for_sm90(kernel, constants, num_warps=4, num_stages=3):
    names = kernel.arg_names
    signature = {n: "constexpr" if n in constants else TYPES.get(n, "i32") for n in names}
    aligned = [i for i, n in enumerate(names)
               if n not in constants and (n.isupper() or n.startswith("stride"))]
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()},
                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})

for case in json.loads(sys.argv[1]):
    config = decode_config(case["d"], case["rows"])
    flags = dict(HEAD_DIM=case["d"], BLOCK_D=case["d"], GROUP=case["group"],
                 BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"])
    flags.update({k: case[k] for k in ("IS_CAUSAL", "WINDOW", "HAS_TREE", "PAGED", "APPEND",
                                       "SPLIT")})
    absent = [("K_NEW", "APPEND"), ("V_NEW", "APPEND"), ("O_PART", "SPLIT"),
              ("LSE_PART", "SPLIT"), ("TABLE", "PAGED"), ("TREE", "HAS_TREE")]
    flags.update({name: None for name, flag in absent if not case[flag]})
    if not case["per_batch"]:
        flags["CACHE_SEQLENS"] = None
    flags.update(dict.fromkeys(case["ones"], 1))
    ttgir = compile_for_sm90(decode_kernel, flags, config["num_warps"],
                             config["num_stages"]).asm["ttgir"]
    print("pipelined" if "async_copy_global_to_local" in ttgir else "not pipelined")
compile_for_sm90(combine_splits_kernel, dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_S=32))
print("combine compiled")
"""
SM90_CASES = [  # d, query x group rows, GQA group, masks, cache kind, ints equal to 1
    dict(d=128, rows=4, group=4, IS_CAUSAL=False, WINDOW=False, HAS_TREE=False, PAGED=False,
         APPEND=True, SPLIT=True, per_batch=False, ones=["n_q", "n_new"]),
    dict(d=64, rows=64, group=1, IS_CAUSAL=True, WINDOW=True, HAS_TREE=True, PAGED=True,
         APPEND=True, SPLIT=False, per_batch=True, ones=[]),
    dict(d=256, rows=8, group=8, IS_CAUSAL=True, WINDOW=True, HAS_TREE=False, PAGED=True,
         APPEND=False, SPLIT=True, per_batch=True, ones=["n_q"]),
    dict(d=16, rows=2, group=2, IS_CAUSAL=False, WINDOW=True, HAS_TREE=True, PAGED=False,
         APPEND=False, SPLIT=False, per_batch=False, ones=["cache_len", "window_right"]),
]


def test_kernels_compile_for_sm90_and_the_decode_loop_is_pipelined():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(SM90_CASES)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(SM90_CASES) + 1 and lines[-1] == "combine compiled"
    assert lines[0] == "pipelined"  # a plain decode step streams K/V tiles ahead of their use
