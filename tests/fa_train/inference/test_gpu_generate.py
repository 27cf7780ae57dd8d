"""GPU: the flash decode path (kernels.flash_attn_with_kvcache) against the PyTorch cache path,
in a GPT and in generation (bf16; skips without CUDA)."""
from dataclasses import dataclass

import pytest
import torch

from fa_train.attention.flash import FlashAttention
from fa_train.attention.cache import attend_cache_torch
from fa_train.inference import Sampling, generate, speculative_generate
from tests.fa_train.inference.helpers import tiny_gpt

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cache_kernel():
    import kernels
    try:
        kernels.flash_attn_with_kvcache  # noqa: B018 - a lazy export
    except AttributeError:
        pytest.skip("kernels.flash_attn_with_kvcache is not in this tree")


@dataclass(frozen=True)
class Windowed:
    window: tuple = (-1, -1)
    deterministic: bool = False


class WindowedFlash(FlashAttention):
    """flash with a sliding window in its config, as a windowed implementation carries it."""
    Config = Windowed


def rel_err(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("heads,heads_kv,head_dim", [(8, 8, 64), (8, 2, 128), (12, 4, 80)])
@pytest.mark.parametrize("n_new,tree", [(1, None), (5, None), (7, [-1, 0, 0, 1, 1, 2, 5])])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("window", [(-1, -1), (100, 0)])
def test_flash_cache_attention_matches_pytorch(heads, heads_kv, head_dim, n_new, tree, dtype,
                                               window):
    torch.manual_seed(heads_kv + n_new)
    batch, capacity = 3, 700
    held = torch.tensor([0, 129, 690 - n_new], dtype=torch.int32, device="cuda")
    k_cache, v_cache = torch.randn(2, batch, capacity, heads_kv, head_dim, device="cuda",
                                   dtype=dtype).unbind(0)
    q = torch.randn(batch, n_new, heads, head_dim, device="cuda", dtype=dtype)
    k, v = torch.randn(2, batch, n_new, heads_kv, head_dim, device="cuda", dtype=dtype).unbind(0)
    parents = None if tree is None else torch.tensor(tree, device="cuda")
    kc64, vc64 = k_cache.double(), v_cache.double()
    ref = attend_cache_torch(q.double(), k.double(), v.double(), kc64, vc64, held,
                             tree_parents=parents, window_size=window)
    out = WindowedFlash(Windowed(window)).attend_cache(q, k, v, k_cache, v_cache, held,
                                                       tree_parents=parents)
    assert out.shape == q.shape and not out.isnan().any()
    assert rel_err(out, ref) < 1e-2
    torch.testing.assert_close(k_cache.double(), kc64)  # both wrote k, v at the same places
    torch.testing.assert_close(v_cache.double(), vc64)


@torch.no_grad()
def test_gpt_decode_with_flash_matches_sdpa():
    ref = tiny_gpt(n_layer=3, vocab_size=500, max_seq_len=512).cuda().to(torch.bfloat16)
    flash = tiny_gpt(n_layer=3, vocab_size=500, max_seq_len=512,
                     attention="flash").cuda().to(torch.bfloat16)
    seqs = torch.randint(0, 500, (2, 300), device="cuda")
    full = ref(seqs).double()
    lengths = torch.tensor([200, 77], dtype=torch.int32, device="cuda")
    cache = flash.new_cache(2, 300)
    flash.prefill(seqs[:, :200], lengths, cache)
    for step in range(20):
        pos = lengths.long() + step
        logits = flash.decode(seqs[torch.arange(2), pos][:, None], cache)[:, 0]
        cache.advance(1)
        assert rel_err(logits, full[torch.arange(2), pos]) < 5e-2  # bf16 vs bf16 paths


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def test_flash_generation_agrees_with_sdpa():
    prompt = list(range(40, 90))
    models = [tiny_gpt(n_layer=2, vocab_size=500, max_seq_len=256, attention=impl)
              .cuda().to(torch.bfloat16) for impl in ("sdpa", "flash")]
    greedy = [generate(m, [prompt], 40, Sampling(temperature=0.0)).tokens[0] for m in models]
    assert (first_difference(*greedy) or 40) >= 10, greedy  # bf16: they may part at a near-tie


@torch.no_grad()
def test_speculative_equals_greedy_with_flash():
    """float32: tree and chain passes differ by rounding only; a difference is allowed only where
    the greedy choice was a near-tie (top-2 logits within 1e-2)."""
    prompt = list(range(40, 90))
    target = tiny_gpt(n_layer=2, vocab_size=500, max_seq_len=256, attention="flash").cuda()
    draft = tiny_gpt(seed=1, n_layer=1, vocab_size=500, max_seq_len=256, attention="flash").cuda()
    greedy = generate(target, [prompt], 40, Sampling(temperature=0.0)).tokens[0]
    for widths in [(1, 1, 1, 1), (2, 2, 1)]:
        out = speculative_generate(target, draft, prompt, 40, widths)
        i = first_difference(out.tokens[0], greedy)
        if i is not None:
            top2 = target(torch.tensor([prompt + greedy[:i]], device="cuda"))[0, -1].topk(2).values
            assert float(top2[0] - top2[1]) < 1e-2, (widths, i, out.tokens[0], greedy)
        assert out.stats["target_passes"] < 40
