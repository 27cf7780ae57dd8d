"""Decode steps on CPU: the cuda_graph option, in-place cache updates, and the graph step's
logic (attention over the whole capacity, the warm-up at a full cache) run eagerly."""
import pytest
import torch

from fa_train.attention import cache as cache_attention
from fa_train.errors import UserError
from fa_train.inference import Sampling, generate
from fa_train.inference.decode_step import EagerStep, GraphStep, decode_step, use_cuda_graph
from fa_train.inference.generation import check_request, prefill
from tests.fa_train.inference.helpers import recompute_greedy, tiny_gpt

PROMPTS = [[5, 17, 3, 88, 41, 9, 60], [2], [70, 71, 72, 73]]


def test_cuda_graph_option_defaults_and_refusals():
    assert use_cuda_graph(None, torch.device("cpu")) is False
    assert use_cuda_graph(None, torch.device("cuda")) is True
    assert use_cuda_graph(False, torch.device("cuda")) is False
    with pytest.raises(UserError) as err:
        generate(tiny_gpt(), PROMPTS, 4, cuda_graph=True)
    assert str(err.value) == ("cuda_graph=True is invalid: CUDA graphs need a model on a CUDA "
                              "device, this one is on cpu")
    with pytest.raises(UserError, match=r"^cuda_graph='yes' is invalid: expected True, False or "
                                        r"None"):
        use_cuda_graph("yes", torch.device("cuda"))
    assert type(decode_step(tiny_gpt(), None, False)) is EagerStep


@pytest.mark.parametrize("n", [1, torch.tensor([2, 0, 1])])
def test_advance_counts_in_place(n):
    cache = tiny_gpt().new_cache(3, 16)
    cache.seqlens.copy_(torch.tensor([4, 1, 9]))
    address = cache.seqlens.data_ptr()
    cache.advance(n)
    assert cache.seqlens.data_ptr() == address and cache.seqlens.dtype == torch.int32
    assert cache.seqlens.tolist() == (torch.tensor([4, 1, 9]) + n).tolist()


def test_capture_mode_attention_equals_the_eager_one(monkeypatch):
    """Attention over the whole capacity, with stale values beyond each row's tokens, equals the
    eager path's over the occupied part (float64), and writes the same cache."""
    gen = torch.Generator().manual_seed(0)
    held = torch.tensor([0, 5, 13], dtype=torch.int32)
    k_cache, v_cache = torch.randn(2, 3, 17, 2, 8, generator=gen, dtype=torch.float64).unbind(0)
    q, k, v = torch.randn(3, 3, 4, 2, 8, generator=gen, dtype=torch.float64).unbind(0)
    kc, vc = k_cache.clone(), v_cache.clone()
    occupied = cache_attention.attend_cache_torch(q, k, v, k_cache, v_cache, held,
                                                  window_size=(6, -1))
    lengths, keep_mask = [], cache_attention.cache_keep_mask
    monkeypatch.setattr(cache_attention, "cache_keep_mask",
                        lambda *a, **kw: lengths.append(a[2]) or keep_mask(*a, **kw))
    monkeypatch.setattr(cache_attention, "capturing_graph", lambda x: True)
    whole = cache_attention.attend_cache_torch(q, k, v, kc, vc, held, window_size=(6, -1))
    assert lengths == [17]
    torch.testing.assert_close(whole, occupied, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kc, k_cache, rtol=0, atol=0)
    torch.testing.assert_close(vc, v_cache, rtol=0, atol=0)


def test_graph_step_logic_run_eagerly_equals_recompute(monkeypatch):
    """The graph step's warm-up at a full cache, then its steps as the capture records them
    (attention over the whole capacity, no position check), give the recompute's tokens."""
    monkeypatch.setattr(cache_attention, "capturing_graph", lambda x: True)
    model = tiny_gpt()
    capacity = check_request(model, PROMPTS, 12)
    cache, logits = prefill(model, PROMPTS, capacity)
    step = GraphStep(model, cache)
    tokens, out = logits.argmax(-1), []
    step.tokens.copy_(tokens[:, None])
    step.decode_at_capacity()
    assert cache.seqlens.tolist() == [len(p) for p in PROMPTS]
    assert cache.k[:, :, -1].abs().sum() > 0  # the warm-up wrote beyond every row's tokens
    for _ in range(11):
        out.append(tokens.tolist())
        tokens = step.step(tokens[:, None]).argmax(-1)
    out.append(tokens.tolist())
    for row, prompt in enumerate(PROMPTS):
        assert [t[row] for t in out] == recompute_greedy(model, prompt, 12)


def test_eager_generation_still_checks_the_request():
    """The steps skip the per-step position check: the request check up front refuses what
    would run past the context."""
    model = tiny_gpt(max_seq_len=16)
    assert len(generate(model, [[1] * 10], 6, Sampling(temperature=0.0)).tokens[0]) == 6
    with pytest.raises(UserError, match="max_new_tokens=7 is invalid: expected at most 6"):
        generate(model, [[1] * 10], 7, Sampling(temperature=0.0))
