"""The sparse baselines' layouts (Longformer, BigBird, Sparse Transformer fixed and strided)
against loop definitions, and LayoutSpec's one-line errors for parameters of another pattern."""
import pytest
import torch

from kernels.layouts import (LAYOUT_KINDS, LayoutSpec, fixed_layout, random_layout,
                             strided_layout)


def _loop(nb, keep):
    return torch.tensor([[keep(i, j) for j in range(nb)] for i in range(nb)], dtype=torch.bool)


@pytest.mark.parametrize("nb", [1, 5, 12])
@pytest.mark.parametrize("stride, summary", [(1, 1), (3, 1), (4, 2), (4, 4)])
def test_fixed_layout_matches_its_definition(nb, stride, summary):
    want = _loop(nb, lambda i, j: i // stride == j // stride or j % stride >= stride - summary)
    assert torch.equal(fixed_layout(nb * 16, 16, stride, summary), want)


@pytest.mark.parametrize("nb", [1, 7, 12])
@pytest.mark.parametrize("stride", [1, 2, 5])
def test_strided_layout_matches_its_definition(nb, stride):
    want = _loop(nb, lambda i, j: abs(i - j) < stride or abs(i - j) % stride == 0)
    assert torch.equal(strided_layout(nb * 8 - 3, 8, stride), want)  # ragged last block


def test_random_layout_is_seeded_and_avoids_excluded_blocks():
    exclude = torch.eye(10, dtype=torch.bool)
    a = random_layout(160, 16, 3, seed=7, exclude=exclude)
    assert torch.equal(a, random_layout(160, 16, 3, seed=7, exclude=exclude))
    assert not torch.equal(a, random_layout(160, 16, 3, seed=8, exclude=exclude))
    assert (a.sum(1) == 3).all() and not (a & exclude).any()
    full = random_layout(64, 16, 9, seed=0, exclude=exclude[:4, :4])  # more than the free blocks
    assert torch.equal(full, ~exclude[:4, :4])


def test_longformer_and_bigbird_specs():
    nb, w, g = 12, 1, 2
    want = _loop(nb, lambda i, j: abs(i - j) <= w or i < g or j < g)
    longformer = LayoutSpec(block_size=16, layout="longformer", local_window=w, global_size=g)
    assert torch.equal(longformer.build(nb * 16), want)
    bigbird = LayoutSpec(block_size=16, layout="bigbird", local_window=w, global_size=g,
                         random_blocks=2, random_seed=3)
    layout = bigbird.build(nb * 16)
    assert torch.equal(layout & want, want)
    extra = layout & ~want
    assert (extra[g:].sum(1) == 2).all() and not extra[:g].any()  # global rows are full already
    assert torch.equal(layout, bigbird.build(nb * 16))
    assert torch.equal(bigbird.build(nb * 16, causal=True), torch.tril(layout))


@pytest.mark.parametrize("kwargs, message", [
    (dict(layout="bigbirds"), r"layout must be one of \['bigbird', 'butterfly'"),
    (dict(layout="fixed"), "layout=fixed needs stride"),
    (dict(layout="longformer", butterfly_size=4), "butterfly_size applies to layout=butterfly"),
    (dict(random_blocks=2), "random_blocks applies to layout=bigbird only, not layout=butterfly"),
    (dict(layout="strided", stride=2, summary_size=2), "summary_size applies to layout=fixed only"),
    (dict(layout="fixed", stride=2, summary_size=3), "summary_size must be <= stride"),
    (dict(layout="strided", stride=0), "stride must be >= 1, got 0"),
])
def test_parameters_of_another_pattern_fail_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LayoutSpec(**kwargs).build(256)


def test_every_kind_builds_and_labels_itself():
    for kind in LAYOUT_KINDS:
        spec = LayoutSpec(block_size=16, layout=kind, stride=2 if kind in ("fixed", "strided")
                          else None)
        assert spec.build(96).shape == (6, 6)
        assert kind == "butterfly" or f"layout={kind}" in spec.label()
