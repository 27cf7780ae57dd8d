"""KV-cache generation against a no-cache recompute, sampling options, stopping, bad input."""
import pytest
import torch

from fa_train.errors import UserError
from fa_train.inference import Sampling, generate
from fa_train.inference.text import StopStrings, Streamer
from tests.fa_train.inference.helpers import recompute_greedy, scaled_gpt, tiny_gpt

PROMPTS = [[5, 17, 3, 88, 41, 9, 60], [2], [70, 71, 72, 73]]


def test_cached_logits_equal_full_forward_logits():
    """Prefill over right-padded prompts, then one decode step per token: every step's logits
    equal the full forward's at that position to float32 tolerance (the cache path reduces over
    the same keys in another order and shape, so not bit for bit)."""
    model = tiny_gpt()
    seqs = torch.randint(0, 97, (3, 30), generator=torch.Generator().manual_seed(1))
    full = model(seqs)
    lengths = torch.tensor([11, 4, 19], dtype=torch.int32)
    idx = seqs[:, :19].clone()
    cache = model.new_cache(3, 30)
    last = model.prefill(idx, lengths, cache)
    for r, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(last[r], full[r, n - 1], atol=1e-5, rtol=1e-5)
    for step in range(11):
        pos = lengths + step
        logits = model.decode(seqs[torch.arange(3), pos][:, None], cache)[:, 0]
        cache.advance(1)
        torch.testing.assert_close(logits, full[torch.arange(3), pos], atol=1e-5, rtol=1e-5)


def test_greedy_with_cache_equals_recompute():
    """Tokens equal exactly (float32 logits agree to ~1e-6, far from any argmax tie here)."""
    model = tiny_gpt()
    out = generate(model, PROMPTS, 20, Sampling(temperature=0.0))
    for prompt, tokens in zip(PROMPTS, out.tokens):
        assert tokens == recompute_greedy(model, prompt, 20)
    assert len({tuple(t) for t in out.tokens}) == 3 and len(set(out.tokens[0])) > 3
    t = out.timing
    assert t.prefill_tokens == 12 and t.decode_tokens == 60 and t.prefill_s > 0 and t.decode_s > 0
    assert "prefill: 12 tokens" in t.summary() and "decode: 60 tokens" in t.summary()


@torch.no_grad()
def test_gpt2_small_greedy_with_cache_equals_recompute():
    """GPT-2 small's shape (124M parameters, float32, the CPU's sdpa path): a batch of two
    prompts, 8 greedy tokens each, equal to the recompute (weights scaled by 2: varied tokens,
    top-two logit margins above 0.05, far beyond float32 rounding)."""
    model = scaled_gpt(scale=2.0, preset="gpt2-small", vocab_size=50257, max_seq_len=1024,
                       attention="sdpa")
    prompts = [[464, 3290, 286, 262, 1578, 318, 257, 1332], [50256]]
    out = generate(model, prompts, 8, Sampling(temperature=0.0)).tokens
    assert out == [recompute_greedy(model, p, 8) for p in prompts]
    assert len(set(out[0])) > 4


def test_top_k_one_is_greedy_and_seeds_fix_samples():
    model = tiny_gpt()
    greedy = generate(model, PROMPTS, 12, Sampling(temperature=0.0)).tokens
    assert generate(model, PROMPTS, 12, Sampling(temperature=1.5, top_k=1), seed=3).tokens == greedy
    assert generate(model, PROMPTS, 12, Sampling(top_p=1e-6), seed=3).tokens == greedy
    a = generate(model, PROMPTS, 12, Sampling(temperature=2.0), seed=7).tokens
    assert a == generate(model, PROMPTS, 12, Sampling(temperature=2.0), seed=7).tokens
    assert a != generate(model, PROMPTS, 12, Sampling(temperature=2.0), seed=8).tokens
    assert a != greedy


def test_top_k_and_top_p_restrict_the_candidates():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(2000, 1)
    probs = logits[0].softmax(0)
    gen = torch.Generator().manual_seed(0)
    seen = set(Sampling(top_k=3).next_tokens(logits, gen).tolist())
    assert seen == {0, 1, 2}
    p = float(probs[:2].sum()) - 1e-3  # the top two tokens are needed to reach p
    assert set(Sampling(top_p=p).next_tokens(logits, gen).tolist()) == {0, 1}
    counts = torch.bincount(Sampling().next_tokens(logits, gen), minlength=6) / 2000
    torch.testing.assert_close(counts, probs, atol=0.04, rtol=0)


def test_end_of_text_and_stop_strings_end_a_row():
    model = tiny_gpt()
    free = generate(model, PROMPTS[:1], 20, Sampling(temperature=0.0)).tokens[0]
    eos = free[5]
    assert generate(model, PROMPTS[:1], 20, Sampling(temperature=0.0),
                    eos_id=eos).tokens[0] == free[:free.index(eos)]
    decode = lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    stop = StopStrings(decode, [f"<{free[7]}><{free[8]}>"])
    cut = generate(model, PROMPTS[:1], 20, Sampling(temperature=0.0), stop=stop).tokens[0]
    first = next(i for i in range(1, 20) if free[i - 1:i + 1] == free[7:9])
    assert cut == free[:first + 1]
    assert stop.cut(decode(cut)) == decode(free[:first - 1])


def test_streamer_holds_back_partial_characters_and_stop_strings():
    shown = []
    join = "".join
    streamer = Streamer(join, shown.append, StopStrings(join, ["END"]))
    expected = {"ab": "ab", "ab\ufffd": "ab", "abc": "abc", "abcE": "abc", "abcEN": "abc",
                "abcENx": "abcENx", "abcENxEND": "abcENx", "abcENxENDyz": "abcENx"}
    for text, visible in expected.items():
        streamer(0, list(text))
        assert join(shown) == visible, text
    streamer.finish("abcENx")
    assert join(shown) == "abcENx"


@pytest.mark.parametrize("kwargs,message", [
    (dict(temperature=-1.0), "temperature=-1.0 is invalid: expected a number in [0, inf]"),
    (dict(top_k=0), "top_k=0 is invalid: expected an integer >= 1"),
    (dict(top_p=0.0), "top_p=0.0 is invalid: expected a number in (0, 1]"),
    (dict(top_p=1.5), "top_p=1.5 is invalid: expected a number in (0, 1]"),
])
def test_bad_sampling_values_are_refused(kwargs, message):
    with pytest.raises(UserError) as err:
        Sampling(**kwargs)
    assert str(err.value) == message


@pytest.mark.parametrize("prompts,n,message", [
    ([list(range(65))], 1, "prompt is invalid: 65 tokens is longer than the model's context "
                           "(model.max_seq_len=64)"),
    ([[1] * 60], 10, "max_new_tokens=10 is invalid: expected at most 4 (a 60-token prompt in a "
                     "context of 64)"),
    ([[1], []], 4, "prompt is invalid: every prompt needs at least one token"),
    ([[1]], 0, "max_new_tokens=0 is invalid: expected an integer >= 1"),
])
def test_requests_that_do_not_fit_are_refused(prompts, n, message):
    with pytest.raises(UserError) as err:
        generate(tiny_gpt(), prompts, n)
    assert str(err.value) == message
