"""Launch-parameter tables: block-sparse calls override the dense entries only where swept."""
from kernels import tuning


def test_sparse_calls_take_their_own_tiles_only_where_swept(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    dense, sparse = tuning.forward_config(128, False), tuning.forward_config(128, False, sparse=True)
    assert (sparse["BLOCK_M"], sparse["BLOCK_N"], sparse["num_warps"]) == (64, 64, 4)
    assert dense["num_warps"] == 8
    sparse64 = tuning.forward_config(64, True, sparse=True)
    assert (sparse64["BLOCK_M"], sparse64["BLOCK_N"], sparse64["num_warps"]) == (64, 64, 4)
    assert tuning.forward_config(32, True, sparse=True) == tuning.forward_config(32, True)
    (dkdv, dq), (dkdv_s, dq_s) = (tuning.backward_configs(64, sparse=s) for s in (False, True))
    assert dkdv_s == dkdv and dq_s["BLOCK_M"] == 64 and dq["BLOCK_M"] == 128
    (dkdv, dq), (dkdv_s, dq_s) = (tuning.backward_configs(128, sparse=s) for s in (False, True))
    assert dkdv_s == dkdv and dq_s == dq
    assert tuning.backward_configs(64, atomic=True, sparse=True)[1] is None


def test_interpreter_ignores_the_tables(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert tuning.forward_config(64, False, sparse=True)["BLOCK_M"] == tuning.INTERPRETER_TILE


def test_short_causal_calls_take_smaller_forward_tiles(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    short = tuning.forward_config(64, True, seqlen_q=tuning.SHORT_SEQLEN)
    long = tuning.forward_config(64, True, seqlen_q=tuning.SHORT_SEQLEN + 1)
    assert (short["BLOCK_M"], short["num_warps"]) == (64, 4)
    assert long == tuning.forward_config(64, True) and long["BLOCK_M"] == 128
    assert tuning.forward_config(64, False, seqlen_q=1024) == tuning.forward_config(64, False)
    assert tuning.forward_config(16, True, seqlen_q=1024) == tuning.forward_config(16, True)


def test_tile_width_and_grid_arithmetic():
    from kernels.attention_launch import block_d_for, cdiv
    assert [block_d_for(d) for d in (1, 16, 17, 33, 64, 65, 128)] == [16, 16, 32, 64, 64, 128, 128]
    assert [cdiv(n, 64) for n in (1, 63, 64, 65, 1000)] == [1, 1, 1, 2, 16]


def test_dq_atomics_only_with_dropout_at_small_head_dims():
    assert tuning.atomic_dq(0.1, 64) and tuning.atomic_dq(0.1, 16)
    assert not tuning.atomic_dq(0.0, 64)
    assert not tuning.atomic_dq(0.1, 128)


def test_tma_loads_where_measured_faster(monkeypatch):
    """Round 24: per-program descriptors in the dense forward at d = 128 (not with the short
    causal tiles) and in the backward passes at d = 64 beyond SHORT_SEQLEN without atomics.
    Round 26: the launcher's descriptors in the block-sparse forward at d = 64 and 128."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    long, short = tuning.SHORT_SEQLEN + 1, tuning.SHORT_SEQLEN
    program, host = tuning.PROGRAM_DESCRIPTORS, tuning.HOST_DESCRIPTORS
    assert tuning.forward_config(128, False)["TMA"] == program
    assert tuning.forward_config(128, True, seqlen_q=long)["TMA"] == program
    assert not tuning.forward_config(128, True, seqlen_q=short)["TMA"]
    assert tuning.forward_config(128, False, sparse=True)["TMA"] == host
    assert tuning.forward_config(128, True, sparse=True, seqlen_q=short)["TMA"] == host
    assert tuning.forward_config(64, False, sparse=True)["TMA"] == host
    assert not tuning.forward_config(32, False, sparse=True)["TMA"]
    assert not tuning.forward_config(64, False)["TMA"]
    assert all(c["TMA"] == program for c in tuning.backward_configs(64, seqlen_q=long))
    assert not any(c["TMA"] for c in tuning.backward_configs(64, seqlen_q=short))
    assert not any(c["TMA"] for c in tuning.backward_configs(64))
    assert not any(c["TMA"] for c in tuning.backward_configs(64, sparse=True, seqlen_q=long))
    assert not any(c["TMA"] for c in tuning.backward_configs(128, seqlen_q=long))
    assert not tuning.backward_configs(64, atomic=True, seqlen_q=long)[0]["TMA"]


def test_long_block_sparse_rows_take_the_dense_forward_tile_at_d128(monkeypatch):
    """Round 28: 128 x 128 forward tiles over 128-token layout blocks from LONG_ROW_BLOCKS listed
    blocks per row, without causal mask or dropout; 64 x 64 otherwise."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    long = tuning.LONG_ROW_BLOCKS

    def tile(d=128, causal=False, dropout=False, block=128, rows=long):
        c = tuning.forward_config(d, causal, sparse=True, dropout=dropout, layout_block=block,
                                  row_blocks=rows)
        return c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]
    assert tile() == (128, 128, 8)
    assert tile(rows=long - 0.5) == tile(causal=True) == tile(dropout=True) == (64, 64, 4)
    assert tile(block=64) == (64, 64, 4)
    assert tile(d=64) == (64, 64, 4)
    assert tuning.forward_config(128, False, sparse=True)["BLOCK_M"] == 64


def test_layout_rows_counts_listed_blocks_per_block_row():
    import torch
    from kernels import BlockSparseIndex
    from kernels.attention_launch import AttentionProblem
    from kernels.layouts import butterfly_layout
    q = torch.zeros(1, 1024, 2, 16)
    index = BlockSparseIndex.from_layout(butterfly_layout(1024, 128, n_factors=2), 128)
    prob = AttentionProblem(q, q, sm_scale=0.25, sparse=index)
    assert prob.layout_rows() == (128, 3.0)
    causal = BlockSparseIndex.from_layout(torch.ones(8, 8, dtype=torch.bool), 128, causal=True)
    prob = AttentionProblem(q, q, sm_scale=0.25, causal=True, sparse=causal)
    assert prob.layout_rows() == (128, 36 / 8)
    dense = AttentionProblem(q, q, sm_scale=0.25)
    assert dense.layout_rows() == (0, 0.0)


def test_narrow_windows_take_smaller_tiles_without_dropout(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    span = tuning.NARROW_WINDOW
    for d in (64, 128):
        fwd = tuning.forward_config(d, True, seqlen_q=8192, window_span=span)
        assert (fwd["BLOCK_M"], fwd["BLOCK_N"], fwd["TMA"]) == (64, 32, tuning.POINTER_LOADS)
        dkdv, dq = tuning.backward_configs(d, seqlen_q=8192, window_span=span)
        assert dq["BLOCK_M"] == 64 and dkdv["BLOCK_M"] == (32 if d == 128 else 64)
        dense = tuning.forward_config(d, True, seqlen_q=8192)
        for other in (dict(window_span=span + 1), dict(window_span=span, dropout=True)):
            assert tuning.forward_config(d, True, seqlen_q=8192, **other) == dense
            assert (tuning.backward_configs(d, seqlen_q=8192, **other)
                    == tuning.backward_configs(d, seqlen_q=8192))
    sparse = tuning.forward_config(64, False, sparse=True, window_span=span)
    assert sparse == tuning.forward_config(64, False, sparse=True)


def test_window_span_counts_the_keys_a_query_sees():
    import torch
    from kernels.attention_launch import AttentionProblem
    q = torch.zeros(1, 8, 2, 16)
    spans = {(window, causal): AttentionProblem(q, q, sm_scale=1.0, causal=causal,
                                                window=window).window_span
             for window, causal in [((256, 256), False), ((256, -1), True), ((256, 0), False),
                                    ((256, -1), False), ((-1, 4), False), ((-1, -1), True)]}
    assert list(spans.values()) == [513, 257, 257, 0, 0, 0]
