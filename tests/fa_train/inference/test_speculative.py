"""Speculative greedy decoding returns exactly the target's greedy tokens."""
import pytest
import torch

from fa_train.errors import UserError
from fa_train.inference import Sampling, generate, speculative_generate
from fa_train.inference.speculative import TokenTree
from tests.fa_train.inference.helpers import tiny_gpt

PROMPT = [5, 17, 3, 88, 41, 9, 60]


@pytest.fixture(scope="module")
def target():
    return tiny_gpt(seed=0, n_layer=2)


@pytest.mark.parametrize("widths", [(1, 1, 1, 1), (2, 2, 1), (3,)])
def test_speculative_equals_greedy(target, widths):
    greedy = generate(target, [PROMPT], 25, Sampling(temperature=0.0)).tokens
    draft = tiny_gpt(seed=1, n_layer=1)
    out = speculative_generate(target, draft, PROMPT, 25, widths)
    assert out.tokens == greedy
    s = out.stats
    assert 1 <= s["target_passes"] <= 24 and 0 <= s["acceptance_rate"] <= 1


def test_a_draft_equal_to_the_target_is_always_accepted(target):
    greedy = generate(target, [PROMPT], 21, Sampling(temperature=0.0)).tokens
    out = speculative_generate(target, target, PROMPT, 21, (1, 1, 1, 1))
    assert out.tokens == greedy
    assert out.stats["acceptance_rate"] == 1.0 and out.stats["target_passes"] == 4


def test_a_partly_right_draft_gets_partial_acceptance(target):
    """A draft that agrees with the target on half its guesses: some accepted, some not."""
    greedy = generate(target, [PROMPT], 24, Sampling(temperature=0.0)).tokens
    mixed = tiny_gpt(seed=0, n_layer=2)
    with torch.no_grad():
        mixed.blocks[1].mlp.c_proj.weight.mul_(1.6)
    out = speculative_generate(target, mixed, PROMPT, 24, (2, 1, 1))
    assert out.tokens == greedy
    assert 0 < out.stats["acceptance_rate"] < 1


def test_stop_and_end_of_text_in_speculative_output(target):
    greedy = generate(target, [PROMPT], 20, Sampling(temperature=0.0)).tokens[0]
    eos = greedy[6]
    out = speculative_generate(target, target, PROMPT, 20, (1, 1, 1), eos_id=eos)
    assert out.tokens[0] == greedy[:greedy.index(eos)]


def test_greedy_path_follows_matching_children():
    tree = TokenTree(7)
    a, b = tree.add(0, 1), tree.add(0, 2)
    c = tree.add(b, 5)
    tree.add(a, 5)
    assert tree.greedy_path([2, 0, 5, 0, 0]) == [0, b, c]
    assert tree.greedy_path([3, 0, 0, 0, 0]) == [0]


def test_mismatched_draft_or_tree_is_refused(target):
    with pytest.raises(UserError, match="draft is invalid: its vocabulary \\(50 tokens\\) "
                                        "differs from the target's \\(97\\)"):
        speculative_generate(target, tiny_gpt(vocab_size=50), PROMPT, 5)
    with pytest.raises(UserError, match="spec_tree width=0 is invalid"):
        speculative_generate(target, target, PROMPT, 5, (2, 0))
