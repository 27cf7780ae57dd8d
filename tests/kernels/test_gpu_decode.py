"""GPU checks of flash_attn_with_kvcache at realistic sizes (bf16/fp16 against float64)."""
import pytest
import torch

from kernels import flash_attn_with_kvcache, reference_attention_with_kvcache
from tests.kernels.helpers import rel_err
from tests.kernels.test_gpu_kernels import BAND, poison_allocator

pytestmark = pytest.mark.gpu


def _cache(batch, capacity, heads_kv, head_dim, dtype):
    return [torch.randn(batch, capacity, heads_kv, head_dim, device="cuda", dtype=dtype)
            for _ in range(2)]


def _check(q, k_cache, v_cache, num_splits=0, tiles=None, **kwargs):
    """Kernel against the reference (on copies of the caches); returns the caches it wrote."""
    ref = reference_attention_with_kvcache(q, k_cache, v_cache, **kwargs)
    poison_allocator()
    kc, vc = k_cache.clone(), v_cache.clone()
    out = flash_attn_with_kvcache(q, kc, vc, num_splits=num_splits, tiles=tiles, **kwargs)
    assert not torch.isnan(out).any(), "output has NaN (unwritten or invalid)"
    err = rel_err(out, ref)
    assert err < BAND[q.dtype], f"rel err {err:.2e}"
    return kc, vc


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128, 256, 80])
@pytest.mark.parametrize("heads,heads_kv", [(16, 16), (32, 8), (8, 1)])
@pytest.mark.parametrize("num_splits", [0, 1, 13])
def test_decode_step(dtype, head_dim, heads, heads_kv, num_splits):
    torch.manual_seed(head_dim + heads_kv + num_splits)
    batch, capacity = 3, 4100
    q = torch.randn(batch, 1, heads, head_dim, device="cuda", dtype=dtype)
    k_cache, v_cache = _cache(batch, capacity, heads_kv, head_dim, dtype)
    k, v = _cache(batch, 1, heads_kv, head_dim, dtype)
    lens = torch.tensor([4099, 1, 2500], dtype=torch.int32, device="cuda")
    kc, vc = _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, num_splits=num_splits)
    for b, pos in enumerate(lens.tolist()):  # the step's token written, nothing else
        k_cache[b, pos], v_cache[b, pos] = k[b, 0], v[b, 0]
    assert torch.equal(kc, k_cache) and torch.equal(vc, v_cache)


@pytest.mark.parametrize("tiles", [dict(BLOCK_N=32, num_stages=2, num_warps=8),
                                   dict(BLOCK_N=128, num_stages=4, num_warps=8),
                                   dict(BLOCK_N=128, num_stages=2, num_warps=4)])
@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("num_splits", [0, 7])
def test_swept_tiles(tiles, head_dim, num_splits):
    """The tiles of a sweep (research/kernel_probes/tune_decode.py), also those too deep for
    shared memory at d 256 (the launcher lowers their stages), give correct steps."""
    torch.manual_seed(head_dim + num_splits)
    q = torch.randn(3, 1, 32, head_dim, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = _cache(3, 4100, 8, head_dim, torch.bfloat16)
    k, v = _cache(3, 1, 8, head_dim, torch.bfloat16)
    lens = torch.tensor([4099, 1, 2500], dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, num_splits=num_splits, tiles=tiles)


@pytest.mark.parametrize("cache_len", [16384, 65536])
def test_long_cache(cache_len):
    torch.manual_seed(cache_len)
    q = torch.randn(2, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = _cache(2, cache_len, 8, 128, torch.bfloat16)
    _check(q, k_cache, v_cache, cache_seqlens=cache_len)


@pytest.mark.parametrize("window", [(-1, -1), (1000, 0), (300, 200)])
def test_causal_multi_token_window(window):
    torch.manual_seed(sum(window))
    q = torch.randn(2, 70, 16, 128, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = _cache(2, 3000, 4, 128, torch.bfloat16)
    k, v = _cache(2, 70, 4, 128, torch.bfloat16)
    lens = torch.tensor([2900, 17], dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, causal=True, window_size=window)


@pytest.mark.parametrize("page_size", [256, 16, 48])
def test_paged_cache(page_size):
    torch.manual_seed(page_size)
    batch, max_blocks, heads_kv = 3, 8192 // page_size, 8
    pages_k, pages_v = _cache(batch * max_blocks + 5, page_size, heads_kv, 128, torch.bfloat16)
    table = torch.randperm(batch * max_blocks + 5, device="cuda")[:batch * max_blocks]
    table = table.view(batch, max_blocks).to(torch.int32)
    q = torch.randn(batch, 2, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = _cache(batch, 2, heads_kv, 128, torch.bfloat16)
    lens = torch.tensor([8000, page_size - 1, 3000], dtype=torch.int32, device="cuda")
    kc, vc = _check(q, pages_k, pages_v, k=k, v=v, cache_seqlens=lens, causal=True,
                    block_table=table)
    for b, start in enumerate(lens.tolist()):
        for t, pos in enumerate(range(start, start + 2)):
            page, row = table[b, pos // page_size], pos % page_size
            pages_k[page, row], pages_v[page, row] = k[b, t], v[b, t]
    assert torch.equal(kc, pages_k) and torch.equal(vc, pages_v)


def test_tree_of_drafts():
    torch.manual_seed(5)
    parents = [-1, 0, 0, 0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10]
    q = torch.randn(2, 16, 32, 128, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = _cache(2, 5000, 8, 128, torch.bfloat16)
    k, v = _cache(2, 16, 8, 128, torch.bfloat16)
    lens = torch.tensor([4900, 100], dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, tree_parents=parents)


def test_decode_step_in_a_cuda_graph():
    """A captured step (cache_seqlens read on the device, not checked) replays for new lengths."""
    torch.manual_seed(6)
    q = torch.randn(2, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = _cache(2, 8192, 8, 128, torch.bfloat16)
    k, v = _cache(2, 1, 8, 128, torch.bfloat16)
    lens = torch.tensor([100, 200], dtype=torch.int32, device="cuda")
    kc, vc = k_cache.clone(), v_cache.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens)  # warm-up (compiles)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens)
    for new_lens in ([7000, 3], [8191, 4096]):
        lens.copy_(torch.tensor(new_lens))
        kc.copy_(k_cache)
        vc.copy_(v_cache)
        graph.replay()
        ref = reference_attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens)
        assert rel_err(out, ref) < BAND[q.dtype]
