"""Sliding-window (local) FlashAttention against the float64 reference, under the Triton
interpreter on CPU: bottom-right aligned windows with odd and unequal lengths, one-sided windows,
causal, padding, dropout (regenerated in the backward), GQA, varlen and packed qkv; the tiles the
kernels visit grow linearly in N; calls without a window compile no window code."""
import pytest
import torch

from kernels import attention_kernels, attention_launch, tuning
from kernels.attention_inputs import check_window
from kernels import flash_attn as fa
from kernels import (dropout_mask, flash_attn_func, flash_attn_varlen_func, next_dropout_seed,
                     reference_attention)
from tests.kernels.helpers import (assert_close_to_reference, assert_varlen_matches_reference,
                                   backward_path, qkv, reference_with_grads, rel_err,
                                   run_with_grads)

TOL32 = 1e-4

CASES = [  # (seqlen_q, seqlen_k, head_dim, window_size, causal)
    (37, 37, 16, (5, 3), False),
    (37, 53, 32, (7, -1), False),    # left only, Nq < Nk
    (53, 37, 16, (-1, 4), False),    # right only, Nq > Nk: the first rows see few keys
    (70, 70, 64, (10, 10), True),    # causal cuts the right side to 0
    (80, 80, 24, (33, 2), False),    # wider than a tile on the left
    (40, 100, 16, (3, 40), True),
    (100, 40, 32, (8, 1), False),    # rows that see no key at all
    (45, 45, 16, (1, 0), False),
]


@pytest.mark.parametrize("seqlen_q,seqlen_k,head_dim,window,causal", CASES)
@pytest.mark.parametrize("deterministic", [False, True])  # atomic dQ / a separate dQ pass
def test_window_matches_reference(seqlen_q, seqlen_k, head_dim, window, causal, deterministic,
                                  monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(seqlen_q * 1000 + seqlen_k + head_dim)
    tensors = qkv(2, seqlen_q, seqlen_k, 2, 2, head_dim)
    out, grads, g = run_with_grads(lambda q, k, v: flash_attn_func(
        q, k, v, causal=causal, window_size=window, deterministic=deterministic), tensors)
    ref, ref_grads = reference_with_grads(tensors, g, causal=causal, window_size=window)
    assert_close_to_reference(out, grads, ref, ref_grads, TOL32)
    plain, _ = reference_attention(*[t.detach().double() for t in tensors], causal=causal)
    assert rel_err(ref, plain) > 1e-2  # the window changes the result


def _padding_mask(batch, seqlen_k):
    mask = torch.rand(batch, seqlen_k) > 0.3
    mask[:, 0] = True
    return mask


@pytest.mark.parametrize("causal,padding,dropout_p,deterministic", [
    (False, True, 0.25, True), (True, True, 0.25, False), (False, False, 0.25, False),
    (True, False, 0.0, True)])
def test_window_with_padding_dropout_and_gqa(causal, padding, dropout_p, deterministic,
                                             monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(7 + causal + 2 * padding)
    batch, seqlen_q, seqlen_k, heads, window = 2, 49, 61, 4, (9, 6)
    tensors = qkv(batch, seqlen_q, seqlen_k, heads, 2, 32)
    mask = _padding_mask(batch, seqlen_k) if padding else None
    state = torch.get_rng_state()
    out, grads, g = run_with_grads(lambda q, k, v: flash_attn_func(
        q, k, v, dropout_p=dropout_p, causal=causal, key_padding_mask=mask, window_size=window,
        deterministic=deterministic), tensors)
    keep = None
    if dropout_p:  # the mask the forward drew, which the backward regenerates
        torch.set_rng_state(state)
        keep = dropout_mask(batch, heads, seqlen_q, seqlen_k, dropout_p, next_dropout_seed(), "cpu")
    ref, ref_grads = reference_with_grads(tensors, g, causal=causal, key_padding_mask=mask,
                                          dropout_mask=keep, dropout_p=dropout_p,
                                          window_size=window)
    assert_close_to_reference(out, grads, ref, ref_grads, TOL32)


@pytest.mark.parametrize("causal,dropout_p", [(False, 0.0), (True, 0.2)])
def test_varlen_window_matches_per_sequence_reference(causal, dropout_p):
    torch.manual_seed(5)
    lengths, window = [5, 45, 1, 20], (6, 3)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    total = sum(lengths)
    tensors = [torch.randn(total, h, 16).requires_grad_() for h in (2, 1, 1)]
    state = torch.get_rng_state()
    out, grads, g = run_with_grads(lambda q, k, v: flash_attn_varlen_func(
        q, k, v, cu, cu, max(lengths), max(lengths), dropout_p=dropout_p, causal=causal,
        window_size=window), tensors)
    torch.set_rng_state(state)
    assert_varlen_matches_reference(out, grads, g, tensors, cu, TOL32, dropout_p,
                                    next_dropout_seed(), causal=causal, window_size=window)


def test_packed_qkv_with_a_window_matches_the_three_views():
    torch.manual_seed(8)
    qkv_packed = torch.randn(2, 41, 3, 2, 16, requires_grad=True)
    out, (dqkv,), g = run_with_grads(
        lambda x: fa.flash_attn_qkvpacked_func(x, window_size=(4, 7)), [qkv_packed])
    views = [t.detach().clone().requires_grad_() for t in qkv_packed.unbind(2)]
    ref, grads, _ = run_with_grads(
        lambda q, k, v: flash_attn_func(q, k, v, window_size=(4, 7)), views, g)
    assert torch.equal(out, ref) and torch.equal(dqkv, torch.stack(grads, 2))
    cu = torch.tensor([0, 30, 82], dtype=torch.int32)
    packed = torch.randn(82, 3, 2, 16)
    out = fa.flash_attn_varlen_qkvpacked_func(packed, cu, 52, causal=True, window_size=(5, -1))
    q, k, v = packed.unbind(1)
    assert torch.equal(out, flash_attn_varlen_func(q, k, v, cu, cu, 52, 52, causal=True,
                                                   window_size=(5, -1)))


def test_a_window_as_wide_as_the_sequence_is_exact_attention():
    torch.manual_seed(9)
    tensors = qkv(1, 50, 50, 2, 1, 32)
    exact, exact_grads, g = run_with_grads(lambda q, k, v: flash_attn_func(q, k, v), tensors)
    out, grads, _ = run_with_grads(
        lambda q, k, v: flash_attn_func(q, k, v, window_size=(50, 49)), tensors, g)
    assert rel_err(out, exact) < 1e-6
    assert all(rel_err(a, b) < 1e-6 for a, b in zip(grads, exact_grads))


def _count_tile_steps(monkeypatch):
    """Count the per-tile steps of the forward, dQ and dK/dV loops (the interpreter calls the
    module's helpers by name)."""
    counts = {}
    for name in ("_fwd_block", "_dq_block", "_dkdv_block"):
        step = getattr(attention_kernels, name)

        def counted(*args, _step=step, _name=name, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _step(*args, **kwargs)
        monkeypatch.setattr(attention_kernels, name, counted)
    return counts


@pytest.mark.parametrize("causal", [False, True])
def test_tiles_outside_the_window_are_skipped(causal, monkeypatch):
    """With a fixed window each query block visits a fixed number of key tiles (and each key
    block a fixed number of query tiles): cost linear in N."""
    counts = _count_tile_steps(monkeypatch)
    tile = tuning.INTERPRETER_TILE
    # a window of half a tile each side touches 3 tiles per block (2 at either end); causal: 2
    per_block = 2 if causal else 3
    for seqlen in (4 * tile, 8 * tile):
        counts.clear()
        tensors = qkv(1, seqlen, seqlen, 1, 1, 16)
        flash_attn_func(*tensors, causal=causal, window_size=(tile // 2, tile // 2),
                        deterministic=True).sum().backward()
        blocks = seqlen // tile
        expected = per_block * blocks - (1 if causal else 2)
        assert counts == {"_fwd_block": expected, "_dq_block": expected,
                          "_dkdv_block": expected}, (seqlen, counts)


@pytest.mark.parametrize("window,causal,windowed,args", [
    ((-1, -1), False, False, (0, 0)),
    ((-1, -1), True, False, (0, 0)),
    ((-1, 5), True, False, (0, 0)),        # causal already bounds the right side
    ((3, -1), True, True, (3, 0)),
    ((-1, 4), False, True, (attention_launch.UNBOUNDED_WINDOW, 4)),
    ((0, 0), False, True, (0, 0)),
])
def test_only_bounded_windows_compile_window_code(window, causal, windowed, args):
    q = torch.randn(1, 8, 1, 16)
    prob = attention_launch.AttentionProblem(
        q, q, sm_scale=1.0, causal=causal,
        window=check_window(window, causal))
    flags = prob.flags()
    assert flags["WINDOW"] is windowed and prob.window_args == args
    assert flags["IS_CAUSAL"] is (causal and not windowed)  # a window carries causal itself


@pytest.mark.parametrize("window,match", [
    ((3,), "pair"), ("3", "pair"), ((1.5, 2), "pair"), ((True, 1), "pair"), (None, "pair"),
    ((-2, 0), ">= -1"), ((0, -5), ">= -1"),
])
def test_bad_windows_name_the_argument(window, match):
    q, k, v = [t.detach() for t in qkv(1, 8, 8, 1, 1, 16)]
    with pytest.raises(ValueError, match=match) as err:
        flash_attn_func(q, k, v, window_size=window)
    assert "window_size" in str(err.value) and "\n" not in str(err.value)


def test_windowed_attention_stays_in_compiled_graphs():
    torch.manual_seed(10)
    tensors = qkv(1, 40, 40, 2, 2, 16)
    fn = lambda q, k, v: flash_attn_func(q, k, v, causal=True, window_size=(6, -1))
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out, grads, g = run_with_grads(compiled, tensors)
    ref, ref_grads, _ = run_with_grads(fn, tensors, g)
    assert torch.equal(out, ref) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
