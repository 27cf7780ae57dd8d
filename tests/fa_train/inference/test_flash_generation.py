"""Generation through the flash kernels on the CPU (Triton interpreter): prefill by
kernels.flash_attn_qkvpacked_func, decode and tree verification by kernels.flash_attn_with_kvcache,
token for token equal to the PyTorch cache path."""
import pytest
import torch

import kernels
from fa_train.inference import Sampling, generate, speculative_generate
from tests.fa_train.inference.helpers import tiny_gpt

PROMPTS = [[5, 17, 3, 88, 41, 9, 60], [2], [70, 71, 72, 73]]
NEW_TOKENS = 6


@pytest.fixture
def cache_kernel_calls(monkeypatch):
    """The trees (tree_parents) of every kernels.flash_attn_with_kvcache call made meanwhile."""
    calls, kernel = [], kernels.flash_attn_with_kvcache

    def counted(*args, **kwargs):
        calls.append(kwargs.get("tree_parents"))
        return kernel(*args, **kwargs)
    monkeypatch.setattr(kernels, "flash_attn_with_kvcache", counted)
    return calls


def test_flash_greedy_generation_equals_sdpa(cache_kernel_calls):
    flash = generate(tiny_gpt(attention="flash"), PROMPTS, NEW_TOKENS, Sampling(temperature=0.0))
    sdpa = generate(tiny_gpt(attention="sdpa"), PROMPTS, NEW_TOKENS, Sampling(temperature=0.0))
    assert flash.tokens == sdpa.tokens and len(set(sdpa.tokens[0])) > 2
    assert len(cache_kernel_calls) == 2 * (NEW_TOKENS - 1)  # 2 layers x the decode steps


def test_flash_speculative_decoding_equals_greedy(cache_kernel_calls):
    target = tiny_gpt(attention="flash")
    greedy = generate(target, PROMPTS[:1], NEW_TOKENS, Sampling(temperature=0.0)).tokens
    draft = tiny_gpt(seed=1, n_layer=1, attention="flash")
    out = speculative_generate(target, draft, PROMPTS[0], NEW_TOKENS, (2, 1))
    assert out.tokens == greedy
    assert any(isinstance(parents, torch.Tensor) for parents in cache_kernel_calls)
