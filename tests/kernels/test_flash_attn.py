"""Dense FlashAttention against the float64 reference, under the Triton interpreter on CPU."""
import itertools

import pytest
import torch

from kernels import attention_launch, attention_op
from kernels import flash_attn as fa
from kernels import tuning
from kernels import (dropout_mask, flash_attn_func, flash_attn_varlen_func, next_dropout_seed,
                     reference_attention)
from tests.kernels.helpers import (assert_close_to_reference, assert_varlen_matches_reference,
                                   backward_path, loads_in_every_mode, qkv, record_launches,
                                   reference_with_grads, rel_err, run_with_grads)

TOL32 = 1e-4  # float32 inputs: interpreter dots are exact float32

SHAPES = [  # (seqlen_q, seqlen_k, head_dim)
    (1, 1, 16), (17, 17, 32), (100, 100, 64), (33, 33, 128), (50, 50, 24), (40, 100, 64),
    (100, 40, 32), (37, 37, 8),
]
FEATURES = list(itertools.product([False, True], [False, True], [0.0, 0.25], [1, 2]))


def _padding_mask(batch, seqlen_k):
    mask = torch.rand(batch, seqlen_k) > 0.3
    mask[:, 0] = True
    return mask


@pytest.mark.parametrize("seqlen_q,seqlen_k,head_dim", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])  # atomic dQ / a separate dQ pass
def test_shapes_match_reference(seqlen_q, seqlen_k, head_dim, causal, deterministic, monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(seqlen_q * 1000 + seqlen_k + head_dim)
    tensors = qkv(2, seqlen_q, seqlen_k, 2, 2, head_dim)
    out, grads, g = run_with_grads(lambda q, k, v: flash_attn_func(
        q, k, v, causal=causal, deterministic=deterministic), tensors)
    ref, ref_grads = reference_with_grads(tensors, g, causal=causal)
    assert_close_to_reference(out, grads, ref, ref_grads, TOL32)


@pytest.mark.parametrize("causal,padding,dropout_p,group", FEATURES)
@pytest.mark.parametrize("deterministic", [False, True])
def test_feature_combinations(causal, padding, dropout_p, group, deterministic, monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(hash((causal, padding, dropout_p, group)) % 2**31)
    batch, seqlen, heads, head_dim = 2, 45, 4, 32
    tensors = qkv(batch, seqlen, seqlen, heads, heads // group, head_dim)
    mask = _padding_mask(batch, seqlen) if padding else None
    seed_state = torch.get_rng_state()
    out, grads, g = run_with_grads(
        lambda q, k, v: flash_attn_func(q, k, v, dropout_p=dropout_p, causal=causal,
                                        key_padding_mask=mask, deterministic=deterministic), tensors)
    keep = None
    if dropout_p:
        torch.set_rng_state(seed_state)
        keep = dropout_mask(batch, heads, seqlen, seqlen, dropout_p, next_dropout_seed(), "cpu")
    ref, ref_grads = reference_with_grads(tensors, g, causal=causal, key_padding_mask=mask,
                                          dropout_mask=keep, dropout_p=dropout_p)
    assert_close_to_reference(out, grads, ref, ref_grads, TOL32)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.float32, TOL32)])
def test_lse_and_low_precision(dtype, tol):
    torch.manual_seed(3)
    q, k, v = [t.detach().to(dtype) for t in qkv(1, 70, 70, 2, 1, 64)]
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    ref, ref_lse = reference_attention(q.double(), k.double(), v.double(), causal=True)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (1, 2, 70)
    assert rel_err(out, ref) < tol
    assert rel_err(lse, ref_lse) < 1e-5


def test_rows_without_keys_are_zero_with_zero_grads():
    torch.manual_seed(4)
    tensors = qkv(2, 40, 20, 2, 2, 16)  # causal with Nq > Nk: the first 20 rows see no key
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1] = False  # batch 1 sees no key at all
    out, grads, _ = run_with_grads(
        lambda q, k, v: flash_attn_func(q, k, v, causal=True, key_padding_mask=mask), tensors)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    assert out[:, :20].abs().max() == 0 and out[1].abs().max() == 0
    assert grads[0][:, :20].abs().max() == 0 and grads[0][1].abs().max() == 0
    assert grads[1][1].abs().max() == 0 and grads[2][1].abs().max() == 0
    assert out[0, 20:].abs().max() > 0


@pytest.mark.parametrize("causal,dropout_p,deterministic",
                         [(False, 0.0, True), (True, 0.0, False), (True, 0.2, True), (True, 0.2, False)])
def test_varlen_matches_per_sequence_reference(causal, dropout_p, deterministic, monkeypatch):
    deterministic = backward_path(monkeypatch, deterministic)
    torch.manual_seed(5)
    lengths = [5, 33, 1, 20]
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    total, heads, heads_kv, head_dim = sum(lengths), 4, 2, 32
    tensors = [torch.randn(total, h, head_dim).requires_grad_() for h in (heads, heads_kv, heads_kv)]
    state = torch.get_rng_state()
    out, grads, g = run_with_grads(
        lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths),
                                               dropout_p=dropout_p, causal=causal,
                                               deterministic=deterministic), tensors)
    torch.set_rng_state(state)
    assert_varlen_matches_reference(out, grads, g, tensors, cu, TOL32, dropout_p,
                                    next_dropout_seed(), causal=causal)


@pytest.mark.parametrize("causal,padding,dropout_p,deterministic", [
    (False, False, 0.0, True), (True, True, 0.0, True), (True, False, 0.25, False),
    (False, True, 0.25, True)])
def test_packed_qkv_matches_the_three_views(causal, padding, dropout_p, deterministic):
    """q, k, v read from one packed tensor and one packed gradient written in place (dQ in slot 0
    by its own pass or added with atomics, dK and dV in slots 1 and 2) give bit for bit what the
    three separate tensors give."""
    torch.manual_seed(12)
    qkv = torch.randn(2, 45, 3, 2, 32, requires_grad=True)
    views = [t.detach().clone().requires_grad_() for t in qkv.detach().unbind(2)]
    kwargs = dict(causal=causal, dropout_p=dropout_p, deterministic=deterministic,
                  key_padding_mask=_padding_mask(2, 45) if padding else None)
    g = torch.randn(2, 45, 2, 32)
    torch.manual_seed(13)
    out, lse = fa.flash_attn_qkvpacked_func(qkv, return_lse=True, **kwargs)
    out.backward(g)
    torch.manual_seed(13)
    ref, ref_lse = flash_attn_func(*views, return_lse=True, **kwargs)
    ref.backward(g)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    assert torch.equal(qkv.grad, torch.stack([t.grad for t in views], dim=2))


def test_packed_qkv_in_any_memory_order():
    """A packed qkv whose slots are far apart (slot-major memory) reads and grads the same."""
    torch.manual_seed(16)
    qkv = torch.randn(2, 3, 33, 2, 16).transpose(1, 2).requires_grad_()  # (B, N, 3, H, d) view
    views = [t.detach().clone().requires_grad_() for t in qkv.detach().unbind(2)]
    out, (dqkv,), g = run_with_grads(lambda x: fa.flash_attn_qkvpacked_func(x, causal=True), [qkv])
    ref, grads, _ = run_with_grads(lambda q, k, v: flash_attn_func(q, k, v, causal=True), views, g)
    assert torch.equal(out, ref) and torch.equal(dqkv, torch.stack(grads, dim=2))


def test_packed_varlen_qkv_matches_the_three_views():
    torch.manual_seed(14)
    cu = torch.tensor([0, 5, 38, 39], dtype=torch.int32)
    qkv = torch.randn(39, 3, 4, 16, requires_grad=True)
    views = [t.detach().clone().requires_grad_() for t in qkv.detach().unbind(1)]
    g = torch.randn(39, 4, 16)
    out = fa.flash_attn_varlen_qkvpacked_func(qkv, cu, 33, causal=True)
    out.backward(g)
    ref = flash_attn_varlen_func(*views, cu, cu, 33, 33, causal=True)
    ref.backward(g)
    assert torch.equal(out, ref)
    assert torch.equal(qkv.grad, torch.stack([t.grad for t in views], dim=1))


def test_packed_qkv_stays_in_compiled_graphs():
    torch.manual_seed(15)
    qkv = torch.randn(1, 40, 3, 2, 16, requires_grad=True)
    fn = lambda qkv: fa.flash_attn_qkvpacked_func(qkv, causal=True)
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out, (grad,), g = run_with_grads(compiled, [qkv])
    ref, (ref_grad,), _ = run_with_grads(fn, [qkv], g)
    assert torch.equal(out, ref) and torch.equal(grad, ref_grad)


def test_dropout_is_reproducible_and_has_the_right_rate():
    q, k, v = [t.detach() for t in qkv(1, 64, 64, 2, 2, 16)]
    torch.manual_seed(11)
    first = flash_attn_func(q, k, v, dropout_p=0.3)
    torch.manual_seed(11)
    second = flash_attn_func(q, k, v, dropout_p=0.3)
    third = flash_attn_func(q, k, v, dropout_p=0.3)
    assert torch.equal(first, second)
    assert not torch.equal(first, third)
    keep = dropout_mask(2, 4, 64, 64, 0.3, seed=123, device="cpu")
    assert abs(keep.float().mean().item() - 0.7) < 0.02
    assert not torch.equal(keep, dropout_mask(2, 4, 64, 64, 0.3, seed=124, device="cpu"))


def test_dropout_uniforms_are_independent_across_neighbouring_keys():
    """One Philox call serves queries q, q + 8 x keys k, k + 1, k + 8, k + 9 (16-bit halves of
    four words): neighbours within and across calls, and heads, must still drop independently."""
    keep = dropout_mask(1, 4, 128, 1000, 0.25, seed=7, device="cpu").float()
    assert abs(keep.mean().item() - 0.75) < 0.01
    for shift in (1, 2, 8, 16):  # keys: the same word, the next call, the same call, a later call
        both = (keep[..., shift:] * keep[..., :-shift]).mean().item()
        assert abs(both - 0.75 ** 2) < 0.01, shift
    for shift in (1, 8):  # queries: the next call, the same call
        both = (keep[..., shift:, :] * keep[..., :-shift, :]).mean().item()
        assert abs(both - 0.75 ** 2) < 0.01, shift
    assert abs((keep[:, 1:] * keep[:, :-1]).mean().item() - 0.75 ** 2) < 0.01  # heads


@pytest.mark.parametrize("dropout_p,deterministic,dq_pass", [
    (0.0, False, True), (0.2, False, False), (0.2, True, True)])
def test_backward_adds_dq_with_atomics_only_with_dropout_and_when_allowed(
        dropout_p, deterministic, dq_pass, monkeypatch):
    launches = record_launches(monkeypatch)
    tensors = qkv(1, 40, 40, 2, 2, 16)
    run_with_grads(lambda q, k, v: flash_attn_func(q, k, v, dropout_p=dropout_p,
                                                   deterministic=deterministic), tensors)
    launched = [name for name, _ in launches]
    assert ("bwd_dq_kernel" in launched) == dq_pass, launched


def test_backward_is_bitwise_deterministic():
    torch.manual_seed(6)
    tensors = qkv(1, 50, 50, 4, 2, 32)
    g = torch.randn(1, 50, 4, 32)
    runs = [run_with_grads(lambda q, k, v: flash_attn_func(q, k, v, causal=True), tensors, g)[1]
            for _ in range(3)]
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


@pytest.mark.parametrize("varlen,seqlen_q,seqlen_k,head_dim,causal,dropout_p,group", [
    (False, 17, 17, 32, False, 0.0, 1), (False, 100, 40, 64, True, 0.0, 2),
    (False, 45, 45, 16, True, 0.25, 1), (False, 1, 33, 64, False, 0.25, 2),
    (True, None, None, 32, True, 0.25, 2)])
def test_tma_loads_compute_what_pointer_loads_do(varlen, seqlen_q, seqlen_k, head_dim, causal,
                                                 dropout_p, group, monkeypatch):
    """Kernels that load their streamed tiles through TMA descriptors, made by each program or by
    the launcher (zeros past each sequence), give bit for bit the outputs and gradients of
    pointer loads. Packed variable-length rows take no launcher descriptors."""
    torch.manual_seed(head_dim + group)
    fallback = None
    if varlen:
        lengths = [5, 33, 1, 20]
        cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
        tensors = [torch.randn(sum(lengths), h, head_dim).requires_grad_()
                   for h in (4, 4 // group, 4 // group)]
        call = lambda q, k, v: flash_attn_varlen_func(  # noqa: E731
            q, k, v, cu, cu, max(lengths), max(lengths), dropout_p=dropout_p, causal=causal,
            deterministic=True)
        fallback = {tuning.HOST_DESCRIPTORS: tuning.POINTER_LOADS}
    else:
        tensors = qkv(2, seqlen_q, seqlen_k, 2, 2 // group, head_dim)
        call = lambda q, k, v: flash_attn_func(  # noqa: E731
            q, k, v, dropout_p=dropout_p, causal=causal, deterministic=True)
    loads_in_every_mode(call, tensors, monkeypatch, fallback)


def test_launcher_descriptors_only_for_eager_unpacked_calls():
    """Launcher descriptors address (batch, seq, heads, d) tensors of their own in eager calls: a
    packed qkv's views and the fake tensors a compiled graph traces fall back to pointer loads;
    per-program descriptors stay."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    config = tuning._interpreter_config()
    qkv_ = torch.randn(1, 16, 3, 2, 64)
    q, k, v = qkv_.unbind(2)
    packed = attention_launch.AttentionProblem(q, k, sm_scale=0.125, packed=qkv_)
    mode = FakeTensorMode()
    fq, fk, fv = (mode.from_tensor(t.contiguous()) for t in (q, k, v))
    with mode:
        traced = attention_launch.AttentionProblem(fq, fk, sm_scale=0.125)
    eager = attention_launch.AttentionProblem(*qkv(1, 16, 16, 2, 2, 64)[:2], sm_scale=0.125)
    for prob, streamed in ((packed, (k, v)), (traced, (fk, fv)), (eager, (q.contiguous(),) * 2)):
        host = prob.tiles(dict(config, TMA=tuning.HOST_DESCRIPTORS), *streamed)["TMA"]
        assert host == (tuning.HOST_DESCRIPTORS if prob is eager else tuning.POINTER_LOADS)
        program = prob.tiles(dict(config, TMA=tuning.PROGRAM_DESCRIPTORS), *streamed)["TMA"]
        assert program == tuning.PROGRAM_DESCRIPTORS


def test_tma_needs_aligned_tensors_and_full_head_tiles():
    """Tiles load through TMA only from 16-byte aligned starts and strides, at head dims that
    fill the tile."""
    q, k, _ = qkv(1, 16, 16, 2, 2, 64)
    prob = attention_launch.AttentionProblem(q, k, sm_scale=0.125)
    x = torch.randn(1, 16, 2, 65)
    assert prob.tma_ready(q, k)
    assert not prob.tma_ready(x[..., 1:], k)  # start 4 bytes in
    assert not prob.tma_ready(x[..., :64], k)  # rows 65 elements apart
    q24, k24, _ = qkv(1, 16, 16, 2, 2, 24)
    prob24 = attention_launch.AttentionProblem(q24, k24, sm_scale=0.125)
    assert not prob24.tma_ready(q24, k24)  # 24 of a 32-wide tile


def test_tma_launches_keep_the_callers_scratch_allocator():
    """Descriptor loads need Triton's scratch allocator: set from PyTorch's where the caller set
    none, never replacing the caller's."""
    import contextvars

    import triton
    from triton.runtime import _allocation

    def check():
        attention_launch.ensure_scratch_allocator()
        assert _allocation._allocator.get() is attention_launch.scratch_from_torch
        mine = lambda size, alignment, stream: None  # noqa: E731
        triton.set_allocator(mine)
        attention_launch.ensure_scratch_allocator()
        assert _allocation._allocator.get() is mine
    contextvars.Context().run(check)  # a fresh context: no allocator set, none left behind


def test_traced_tensors_with_symbolic_sizes():
    """Compiled graphs with dynamic shapes hand the launchers symbolic sizes and strides: TMA
    alignment holds only where it does for every value of the symbols, and launch keys and
    compile-time constants stay plain values (symbolic ones cannot be hashed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (DimDynamic, ShapeEnv,
                                                       StatelessSymbolicContext)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = torch.empty(2, 64, 4, 64, dtype=torch.bfloat16)

    def fake(*dims):
        return mode.from_tensor(x, symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dims]))
    assert attention_launch.tma_aligned(fake(True, True, False, False)) is True  # batch and length symbolic
    assert attention_launch.tma_aligned(fake(True, True, True, True)) is False  # head dim unknown
    # a graph compiled again for a second head dim makes it symbolic; kernels need it concrete
    q = fake(True, True, True, True)
    prob = attention_launch.AttentionProblem(q, q, sm_scale=0.125)
    assert type(prob.head_dim) is int and all(type(v) in (int, bool) for v in prob.flags().values())


def test_non_contiguous_inputs_are_handled():
    torch.manual_seed(7)
    base = torch.randn(1, 2, 30, 32)  # (B, H, N, d) viewed as (B, N, H, d): non-unit head stride
    q = base.transpose(1, 2)
    k = torch.randn(1, 30, 2, 64)[..., ::2]  # last stride 2
    v = torch.randn(1, 30, 2, 32)
    out = flash_attn_func(q, k, v)
    ref, _ = reference_attention(q.double(), k.double(), v.double())
    assert rel_err(out, ref) < TOL32


@pytest.mark.parametrize("make_args,match", [
    (lambda q, k, v: (q[0], k, v), "q must have 4 dims"),
    (lambda q, k, v: (q, k[:1], v[:1]), "batch size of k"),
    (lambda q, k, v: (q, k, v[..., :8]), "k and v must have the same shape"),
    (lambda q, k, v: (q[..., :8], k, v), "head_dim of k"),
    (lambda q, k, v: (q, k[:, :, :3], v[:, :, :3]), "multiple of k/v heads"),
    (lambda q, k, v: (q.long(), k, v), "q has dtype"),
    (lambda q, k, v: (q.double(), k.double(), v.double()), "supported: float16"),
    (lambda q, k, v: (q.half(), k, v), "share a dtype"),
    (lambda q, k, v: ("q", k, v), "q must be a torch.Tensor"),
])
def test_bad_input_names_the_argument(make_args, match):
    q, k, v = [torch.randn(2, 8, 4, 16) for _ in range(3)]
    with pytest.raises((ValueError, TypeError), match=match):
        flash_attn_func(*make_args(q, k, v))


@pytest.mark.parametrize("shape,match", [
    ((2, 8, 3, 4), "qkv must have 5 dims"), ((2, 8, 2, 4, 16), "qkv must hold q, k, v")])
def test_bad_packed_qkv_names_the_argument(shape, match):
    with pytest.raises(ValueError, match=match):
        fa.flash_attn_qkvpacked_func(torch.randn(shape))


def test_bad_options_are_rejected():
    q = torch.randn(2, 8, 2, 16)
    with pytest.raises(ValueError, match="dropout_p"):
        flash_attn_func(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match="key_padding_mask"):
        flash_attn_func(q, q, q, key_padding_mask=torch.ones(2, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="head_dim 200"):
        flash_attn_func(*[torch.randn(1, 4, 1, 200)] * 3)
    cu = torch.tensor([0, 8, 16])
    with pytest.raises(TypeError, match="cu_seqlens_q must be int32"):
        flash_attn_varlen_func(q[0], q[0], q[0], cu, cu.int(), 8, 8)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[-1\]"):
        flash_attn_varlen_func(q.reshape(16, 2, 16), q.reshape(16, 2, 16), q.reshape(16, 2, 16),
                               cu.int(), torch.tensor([0, 8, 15], dtype=torch.int32), 8, 8)


def test_offsets_on_a_device_are_checked_without_a_host_read():
    """On a GPU the offsets are not read back (a read waits for the GPU and splits a compiled
    graph at every call): a meta tensor, whose values cannot be read at all, stands for them."""
    from kernels.attention_inputs import check_cu_seqlens

    cu = torch.empty(3, dtype=torch.int32, device="meta")
    check_cu_seqlens("cu_seqlens", cu, 8, cu.device, 8)
    with pytest.raises(RuntimeError, match="meta tensors"):  # so a host read would fail here
        int(cu[-1])


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 4, 1, 16)
    with pytest.raises(RuntimeError, match="need CUDA tensors"):
        flash_attn_func(q, q, q)


def test_launch_retries_with_fewer_stages_when_shared_memory_runs_out():
    from triton.runtime.errors import OutOfResources

    calls = []

    class FakeKernel:
        class fn:
            __name__ = "fake_kernel"

        def __getitem__(self, grid):
            def run(*args, num_stages, **kwargs):
                calls.append(num_stages)
                if num_stages > 2:
                    raise OutOfResources(300000, 232448, "shared memory")
                return "ran"
            return run

    config = {"BLOCK_M": 128, "num_stages": 4}
    args = (torch.zeros(1),)  # a plain tensor: an eager launch
    assert attention_launch.launch_kernel(FakeKernel(), (1,), args, config) == "ran"
    assert calls == [4, 3, 2]
    assert attention_launch.launch_kernel(FakeKernel(), (1,), args, config) == "ran"
    assert calls[-1] == 2 and len(calls) == 4  # the fitting depth is remembered


def test_torch_compile_keeps_attention_in_the_graph():
    torch.manual_seed(8)
    q, k, v = qkv(1, 40, 40, 2, 2, 16)
    explanation = torch._dynamo.explain(
        lambda q, k, v: flash_attn_func(q, k, v, causal=True, dropout_p=0.1))(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(lambda q, k, v: flash_attn_func(q, k, v, causal=True),
                             backend="aot_eager", fullgraph=True)
    out, grads, g = run_with_grads(compiled, [q, k, v])
    ref, ref_grads, _ = run_with_grads(lambda q, k, v: flash_attn_func(q, k, v, causal=True),
                                       [q, k, v], g)
    assert torch.equal(out, ref) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def test_eager_calls_skip_the_op_dispatch_and_traced_ones_keep_the_op(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx
    torch.manual_seed(9)
    q, k, v = qkv(1, 24, 24, 2, 2, 16)
    ops = []
    op = attention_op.forward_op
    monkeypatch.setattr(attention_op, "forward_op", lambda *a: ops.append(1) or op(*a))
    out, grads, g = run_with_grads(flash_attn_func, [q, k, v])
    assert not ops  # eager: the autograd function, no op
    assert_close_to_reference(out, grads, *reference_with_grads([q, k, v], g), TOL32)
    for mode in ("real", "fake"):
        ops.clear()
        graph = make_fx(lambda q, k, v: flash_attn_func(q, k, v), tracing_mode=mode)(
            q.detach(), k.detach(), v.detach())
        assert ops and "flash_attn_fwd" in graph.code, mode


def test_double_backward_is_refused_clearly():
    torch.manual_seed(10)
    q, k, v = (t.requires_grad_() for t in qkv(1, 16, 16, 2, 2, 16))
    out = flash_attn_func(q, k, v)
    dq, = torch.autograd.grad((out ** 2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        dq.sum().backward()
