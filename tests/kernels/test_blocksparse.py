"""Block-sparse FlashAttention against the reference with the layout expanded to an element mask."""
import pytest
import torch

from kernels import (BlockSparseIndex, blocksparse_attn_func, dropout_mask, next_dropout_seed)
from kernels.layouts import butterfly_layout, layout_union, local_layout
from tests.kernels.helpers import (assert_close_to_reference, backward_path, loads_in_every_mode,
                                   qkv, reference_with_grads, run_with_grads)

TOL32 = 1e-4


def element_mask(layout, block, seqlen_q, seqlen_k):
    return layout.repeat_interleave(block, 0).repeat_interleave(block, 1)[:seqlen_q, :seqlen_k]


def random_layout(nb, density=0.5):
    layout = torch.rand(nb, nb) < density
    layout[nb // 2] = False  # one block row with no block at all
    return layout


@pytest.mark.parametrize("seqlen,block,layout_kind", [
    (70, 16, "random"), (64, 16, "butterfly"), (100, 32, "random"), (1, 16, "random"),
    (130, 64, "random"),  # layout blocks larger than the kernel tile: several tiles per block
])
@pytest.mark.parametrize("causal,padding,dropout_p,deterministic", [
    (False, False, 0.0, False), (True, False, 0.0, True), (False, True, 0.2, True),
    (True, True, 0.2, False),
])
def test_matches_masked_reference(seqlen, block, layout_kind, causal, padding, dropout_p,
                                  deterministic, monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(seqlen + block)
    nb = -(-seqlen // block)
    if layout_kind == "butterfly":
        layout = layout_union(butterfly_layout(seqlen, block), local_layout(seqlen, block, 0))
    else:
        layout = random_layout(nb)
    batch, heads = 2, 2
    tensors = qkv(batch, seqlen, seqlen, heads, 1, 32)
    mask = (torch.rand(batch, seqlen) > 0.25) if padding else None
    state = torch.get_rng_state()
    out, grads, g = run_with_grads(
        lambda q, k, v: blocksparse_attn_func(q, k, v, layout, block_size=block, causal=causal,
                                              dropout_p=dropout_p, key_padding_mask=mask,
                                              deterministic=deterministic), tensors)
    keep = None
    if dropout_p:
        torch.set_rng_state(state)
        keep = dropout_mask(batch, heads, seqlen, seqlen, dropout_p, next_dropout_seed(), "cpu")
    ref, ref_grads = reference_with_grads(
        tensors, g, causal=causal, key_padding_mask=mask, dropout_p=dropout_p, dropout_mask=keep,
        attn_mask=element_mask(layout, block, seqlen, seqlen)[None, None])
    assert_close_to_reference(out, grads, ref, ref_grads, TOL32)


def test_empty_block_rows_give_zero_output_and_gradients():
    torch.manual_seed(1)
    layout = torch.eye(4, dtype=torch.bool)
    layout[1, 1] = False
    tensors = qkv(1, 64, 64, 2, 2, 16)
    out, grads, _ = run_with_grads(
        lambda q, k, v: blocksparse_attn_func(q, k, v, layout, block_size=16), tensors)
    assert out[:, 16:32].abs().max() == 0 and grads[0][:, 16:32].abs().max() == 0
    assert grads[1][:, 16:32].abs().max() == 0 and grads[2][:, 16:32].abs().max() == 0
    assert torch.isfinite(out).all() and out[:, :16].abs().max() > 0


def test_prebuilt_index_matches_layout_tensor():
    torch.manual_seed(2)
    layout = random_layout(4)
    q, k, v = [t.detach() for t in qkv(1, 64, 64, 2, 2, 16)]
    index = BlockSparseIndex.from_layout(layout, 16, 64, 64)
    assert index.density == pytest.approx(layout.float().mean().item())
    assert torch.equal(blocksparse_attn_func(q, k, v, index, block_size=16),
                       blocksparse_attn_func(q, k, v, layout, block_size=16))


def test_bad_layouts_are_rejected():
    q = torch.randn(1, 64, 2, 16)
    with pytest.raises(ValueError, match=r"layout must be a bool tensor of shape"):
        blocksparse_attn_func(q, q, q, torch.ones(3, 4, dtype=torch.bool), block_size=16)
    with pytest.raises(ValueError, match="block_size must be one of"):
        blocksparse_attn_func(q, q, q, torch.ones(3, 3, dtype=torch.bool), block_size=24)
    index = BlockSparseIndex.from_layout(torch.ones(2, 2, dtype=torch.bool), 32)
    with pytest.raises(ValueError, match="layout index was built for"):
        blocksparse_attn_func(q, q, q, index, block_size=16)


@pytest.mark.parametrize("seqlen,causal,dropout_p", [(100, True, 0.0), (64, False, 0.25)])
def test_blocksparse_tma_loads_compute_what_pointer_loads_do(seqlen, causal, dropout_p,
                                                             monkeypatch):
    """Streamed tiles through TMA descriptors, made by each program or by the launcher, give bit
    for bit what pointer loads give (ragged last block, GQA, causal or dropout)."""
    torch.manual_seed(seqlen)
    layout = torch.rand(-(-seqlen // 32), -(-seqlen // 32)) < 0.6
    tensors = qkv(2, seqlen, seqlen, 4, 2, 32)
    loads_in_every_mode(lambda q, k, v: blocksparse_attn_func(
        q, k, v, layout, block_size=32, causal=causal, dropout_p=dropout_p, deterministic=True),
        tensors, monkeypatch)
