"""Attention against a KV cache (fa_train.attention.cache): float64 per-token references."""
import math
from dataclasses import dataclass

import pytest
import torch

from fa_train.attention import build_attention
from fa_train.attention.sdpa import SdpaAttention
from fa_train.attention.cache import attend_cache_torch, new_token_visibility


def reference(q, k_new, v_new, k_old, v_old, held, visible, window=(-1, -1)):
    """Row by row, token by token in float64: token i of row b (at position held[b] + i)
    attends to the row's first held[b] cached tokens and to the new tokens j with
    visible[i, j], of those the ones inside the window around its position."""
    b, nq, hq, d = q.shape
    groups = hq // k_old.shape[2]
    out = torch.zeros(b, nq, hq, d, dtype=torch.float64)
    for r in range(b):
        for i in range(nq):
            pos, (left, right) = held[r] + i, window
            seen = [j for j in range(held[r]) if left < 0 or j >= pos - left] + \
                [held[r] + j for j in range(nq) if visible[i, j]
                 and (left < 0 or held[r] + j >= pos - left) and (right < 0 or j <= i + right)]
            keys = torch.cat([k_old[r, :held[r]], k_new[r]]).double()[seen]
            vals = torch.cat([v_old[r, :held[r]], v_new[r]]).double()[seen]
            for h in range(hq):
                s = keys[:, h // groups] @ q[r, i, h].double() / math.sqrt(d)
                out[r, i, h] = s.softmax(0) @ vals[:, h // groups]
    return out


@pytest.mark.parametrize("heads,heads_kv", [(4, 4), (4, 2)])
@pytest.mark.parametrize("tree", [None, [-1, 0, 0, 1, 2, -1]])
@pytest.mark.parametrize("window", [(-1, -1), (3, 0), (8, -1)])
def test_cache_attention_matches_float64(heads, heads_kv, tree, window):
    torch.manual_seed(len(tree or []) + heads_kv + window[0])
    batch, capacity, d, nq = 3, 37, 16, 6
    held = torch.tensor([0, 5, 30], dtype=torch.int32)
    k_cache, v_cache = torch.randn(2, batch, capacity, heads_kv, d).unbind(0)
    k_old, v_old = k_cache.clone(), v_cache.clone()
    q = torch.randn(batch, nq, heads, d)
    k, v = torch.randn(2, batch, nq, heads_kv, d).unbind(0)
    parents = None if tree is None else torch.tensor(tree)
    out = attend_cache_torch(q, k, v, k_cache, v_cache, held, tree_parents=parents,
                             window_size=window)
    visible = new_token_visibility(nq, parents, "cpu")
    ref = reference(q, k, v, k_old, v_old, held.tolist(), visible, window)
    torch.testing.assert_close(out.double(), ref, atol=2e-6, rtol=1e-5)
    for r, n in enumerate(held.tolist()):  # written in place after the held tokens, rest intact
        torch.testing.assert_close(k_cache[r, n:n + nq], k[r])
        torch.testing.assert_close(v_cache[r, n:n + nq], v[r])
        torch.testing.assert_close(k_cache[r, :n], k_old[r, :n])
        torch.testing.assert_close(k_cache[r, n + nq:], k_old[r, n + nq:])


def test_visibility_of_a_tree():
    sees = new_token_visibility(5, torch.tensor([-1, 0, 0, 1, -1]), "cpu")
    assert sees.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0],
                                   [1, 1, 0, 1, 0], [0, 0, 0, 0, 1]]
    assert torch.equal(new_token_visibility(3, None, "cpu"), torch.ones(3, 3).tril().bool())


@pytest.mark.parametrize("parents", [[0, -1], [-1, 1], [-1, 0, 5], [-1]])
def test_bad_tree_parents_are_refused(parents):
    with pytest.raises(ValueError, match="tree_parents must hold 2 parent indices"):
        new_token_visibility(2, torch.tensor(parents), "cpu")


def test_cache_overflow_is_refused():
    k_cache = torch.zeros(1, 8, 2, 4)
    q = torch.zeros(1, 3, 2, 4)
    with pytest.raises(ValueError, match="KV cache overflow: 6 cached \\+ 3 new tokens exceed "
                                         "its capacity 8"):
        attend_cache_torch(q, q, q, k_cache, k_cache.clone(), torch.tensor([6]))


@pytest.mark.parametrize("impl", ["standard", "sdpa", "auto", "flash"])
def test_every_cpu_implementation_attends_to_the_cache(impl):
    torch.manual_seed(1)
    k_cache, v_cache = torch.randn(2, 2, 10, 2, 8).unbind(0)
    q, k, v = torch.randn(3, 2, 1, 2, 8).unbind(0)
    held = torch.tensor([3, 7])
    expected = attend_cache_torch(q, k, v, k_cache.clone(), v_cache.clone(), held)
    out = build_attention(impl).attend_cache(q, k, v, k_cache, v_cache, held)
    torch.testing.assert_close(out, expected)


def test_an_implementation_with_a_window_attends_inside_it():
    @dataclass(frozen=True)
    class Windowed:
        window: tuple = (2, 0)

    class WindowedSdpa(SdpaAttention):
        Config = Windowed

    torch.manual_seed(2)
    k_cache, v_cache = torch.randn(2, 1, 12, 2, 8).unbind(0)
    q, k, v = torch.randn(3, 1, 3, 2, 8).unbind(0)
    held = torch.tensor([6])
    expected = attend_cache_torch(q, k, v, k_cache.clone(), v_cache.clone(), held,
                                  window_size=(2, 0))
    unbounded = attend_cache_torch(q, k, v, k_cache.clone(), v_cache.clone(), held)
    out = WindowedSdpa().attend_cache(q, k, v, k_cache, v_cache, held)
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, unbounded)
