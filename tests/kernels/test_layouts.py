"""Block-sparse layouts against brute-force loop definitions and the densities in specs/butterfly.md."""
import math
import re

import pytest
import torch

from kernels.layouts import (LayoutSpec, butterfly_layout, causal_layout, density, density_report,
                             global_layout, layout_intersection, layout_union, local_layout,
                             num_blocks)


def brute_butterfly(nb, b, k, g):
    """Per-group definition: inside each b x b diagonal group, (i, j) nonzero iff the in-group
    offsets differ by XOR in {0, 1, 2, ..., 2^(k-1)}; zero outside groups; g dense rows/cols."""
    allowed = {0} | {2 ** t for t in range(k)}
    out = torch.zeros(nb, nb, dtype=torch.bool)
    for i in range(nb):
        for j in range(nb):
            same_group = i // b == j // b
            if (same_group and (i % b) ^ (j % b) in allowed) or i < g or j < g:
                out[i, j] = True
    return out


@pytest.mark.parametrize("seqlen,block", [(1, 1), (7, 2), (64, 16), (100, 8), (256, 16), (1000, 64),
                                          (33, 1), (512, 128)])
def test_butterfly_matches_brute_force(seqlen, block):
    nb = math.ceil(seqlen / block)
    default_b = 1 << (nb - 1).bit_length()
    for b in sorted({1, 2, 4, 8, default_b}):
        for k in range(b.bit_length()):
            for g in (0, 1, 3):
                got = butterfly_layout(seqlen, block, butterfly_size=b, n_factors=k, global_size=g)
                assert got.dtype == torch.bool and got.shape == (nb, nb)
                assert torch.equal(got, brute_butterfly(nb, b, k, g)), (seqlen, block, b, k, g)


def test_butterfly_defaults_use_all_factors_of_next_power_of_two():
    for nb in (1, 3, 5, 16, 17, 64):
        b = 1 << (nb - 1).bit_length()
        assert torch.equal(butterfly_layout(nb * 4, 4), brute_butterfly(nb, b, b.bit_length() - 1, 0))


def test_butterfly_rows_have_k_plus_one_blocks_when_full_groups():
    layout = butterfly_layout(64 * 32, 32, butterfly_size=16, n_factors=3)
    report = density_report(layout)
    assert report["row_nnz_min"] == report["row_nnz_max"] == 4
    assert report["col_nnz_min"] == report["col_nnz_max"] == 4
    assert layout.equal(layout.T)


@pytest.mark.parametrize("nb,plain,with_global", [(16, 31.3, 39.8), (64, 10.9, 13.7), (256, 3.5, 4.3)])
def test_spec_densities(nb, plain, with_global):
    block = 256  # the paper's v1 mask cell width
    # the spec prints one decimal, rounding half up (31.25 -> 31.3)
    assert 100 * density(butterfly_layout(nb * block, block)) == pytest.approx(plain, abs=0.05 + 1e-9)
    got = 100 * density(butterfly_layout(nb * block, block, global_size=1))
    assert got == pytest.approx(with_global, abs=0.05 + 1e-9)
    # density of the full butterfly is (log2(b) + 1) / b
    assert density(butterfly_layout(nb * block, block)) == pytest.approx((math.log2(nb) + 1) / nb)


def test_anchor_densities_at_block_128():
    assert density(butterfly_layout(4096, 128, n_factors=2)) == pytest.approx(0.09375)
    assert density(butterfly_layout(4096, 128, n_factors=4)) == pytest.approx(0.15625)
    assert round(density(butterfly_layout(16384, 128, n_factors=4)), 3) == 0.039


@pytest.mark.parametrize("seqlen,block,window", [(1, 4, 0), (50, 7, 0), (64, 8, 1), (64, 8, 3),
                                                 (64, 8, 100)])
def test_local_layout(seqlen, block, window):
    nb = num_blocks(seqlen, block)
    want = torch.tensor([[abs(i - j) <= window for j in range(nb)] for i in range(nb)])
    assert torch.equal(local_layout(seqlen, block, window), want)


@pytest.mark.parametrize("g", [0, 1, 2, 9, 20])
def test_global_layout(g):
    nb = 9
    want = torch.tensor([[i < g or j < g for j in range(nb)] for i in range(nb)])
    assert torch.equal(global_layout(nb * 3, 3, g), want)


def test_causal_union_intersection():
    a = butterfly_layout(128, 8)
    b = local_layout(128, 8, 2)
    c = causal_layout(a)
    nb = a.shape[0]
    for i in range(nb):
        for j in range(nb):
            assert c[i, j] == (a[i, j] and j <= i)
    assert torch.equal(layout_union(a, b), a | b)
    assert torch.equal(layout_intersection(a, b, c), a & b & c)
    assert torch.equal(layout_union(a), a) and layout_union(a) is not a
    rect = torch.ones(3, 5, dtype=torch.bool)
    assert torch.equal(causal_layout(rect), torch.tril(rect))


def test_density_report():
    layout = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    rep = density_report(layout)
    assert rep == {"shape": [3, 3], "nnz": 3, "total": 9, "density": 3 / 9, "row_nnz_min": 0,
                   "row_nnz_max": 2, "col_nnz_min": 0, "col_nnz_max": 2, "empty_rows": 1}
    assert density(layout) == pytest.approx(1 / 3)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: butterfly_layout(64, 8, butterfly_size=6), ValueError, "butterfly_size must be a power of two"),
    (lambda: butterfly_layout(64, 8, butterfly_size=0), ValueError, "butterfly_size"),
    (lambda: butterfly_layout(64, 8, butterfly_size=4, n_factors=3), ValueError, "n_factors 3 is too large"),
    (lambda: butterfly_layout(64, 8, n_factors=-1), ValueError, "n_factors"),
    (lambda: butterfly_layout(64, 0), ValueError, "block must be >= 1"),
    (lambda: butterfly_layout(0, 8), ValueError, "seqlen must be >= 1"),
    (lambda: butterfly_layout(64, 8.0), TypeError, "block must be an int"),
    (lambda: butterfly_layout(64, 8, global_size=-1), ValueError, "global_size"),
    (lambda: local_layout(64, -8, 1), ValueError, "block"),
    (lambda: local_layout(64, 8, -1), ValueError, "window"),
    (lambda: global_layout(64, 8, -2), ValueError, "global_size"),
    (lambda: causal_layout(torch.ones(4, 4)), TypeError, "bool"),
    (lambda: causal_layout(torch.ones(4, dtype=torch.bool)), ValueError, "2-D"),
    (lambda: layout_union(), ValueError, "at least one"),
    (lambda: layout_union(torch.ones(2, 2, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)),
     ValueError, "layouts[1]"),
])
def test_argument_errors_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        call()


def _composed(seqlen, block, butterfly_size, n_factors, global_size, local_window, causal):
    """The layout the model built from its config before LayoutSpec: butterfly, union with the
    local band, lower block triangle when causal."""
    layout = butterfly_layout(seqlen, block, butterfly_size=butterfly_size, n_factors=n_factors,
                              global_size=global_size)
    if local_window:
        layout = layout_union(layout, local_layout(seqlen, block, local_window))
    return causal_layout(layout) if causal else layout


def _yaml_spec():
    import pathlib

    import yaml
    path = pathlib.Path(__file__).resolve().parents[2] / "configs" / "attention" / "blocksparse.yaml"
    return LayoutSpec.from_config(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("seqlen", [128, 1000, 4096])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("params", [
    (128, None, None, 1, 0),  # configs/attention/blocksparse.yaml
    (64, None, None, 1, 0),   # its block size in the Pathfinder experiment
    (16, None, None, 1, 0),   # the recipes' short-sequence override
    (128, None, 2, 0, 0),     # benchmark and tuning sweeps: k factors, no global blocks
    (128, None, None, 3, 0),  # benchmark density targets: all factors plus global blocks
    (32, 4, 1, 1, 2),         # every parameter set
])
def test_layout_spec_builds_what_the_layout_functions_compose(seqlen, causal, params):
    spec = LayoutSpec(*params)
    try:
        expected = _composed(seqlen, *params, causal)
    except ValueError as exc:  # too many factors for so few blocks: the same error
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            spec.build(seqlen, causal)
        return
    assert torch.equal(spec.build(seqlen, causal), expected)


def test_layout_spec_of_the_attention_config():
    spec = _yaml_spec()
    assert spec == LayoutSpec(block_size=128, global_size=1)
    assert torch.equal(spec.build(2048), butterfly_layout(2048, 128, global_size=1))


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=0), "block_size must be >= 1, got 0"),
    (dict(global_size=-1), "global_size must be >= 0, got -1"),
    (dict(local_window=1.5), "local_window must be an int"),
    (dict(n_factors=-2), "n_factors must be >= 0, got -2"),
    (dict(butterfly_size=3), "butterfly_size must be a power of two"),
])
def test_layout_spec_rejects_bad_parameters_in_one_line(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LayoutSpec(**kwargs)
