"""GPU checks of the attention kernels at realistic sizes (bf16/fp16 against float64)."""
import pytest
import torch

from kernels import (blocksparse_attn_func, dropout_mask, flash_attn_func,
                     flash_attn_qkvpacked_func, flash_attn_varlen_func, next_dropout_seed,
                     reference_attention)
from kernels.layouts import butterfly_layout
from tests.kernels.helpers import backward_path, record_launches, rel_err

pytestmark = pytest.mark.gpu
BAND = {torch.bfloat16: 1e-2, torch.float16: 1e-2}


def poison_allocator(nbytes=2 << 30):
    """Fill the caching allocator's free blocks with NaN so unwritten outputs show up."""
    torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
    torch.cuda.synchronize()


def _inputs(batch, seqlen, heads, heads_kv, head_dim, dtype, seqlen_k=None):
    seqlen_k = seqlen_k or seqlen
    shapes = [(batch, seqlen, heads, head_dim), (batch, seqlen_k, heads_kv, head_dim),
              (batch, seqlen_k, heads_kv, head_dim)]
    return [torch.randn(s, device="cuda", dtype=dtype).requires_grad_() for s in shapes]


def _check(fn, tensors, dtype, **ref_kwargs):
    poison_allocator()
    out = fn(*tensors)
    g = torch.randn_like(out)
    out.backward(g)
    grads = [t.grad for t in tensors]
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    ref, _ = reference_attention(*leaves, **ref_kwargs)
    ref.backward(g.double())
    for name, x, r in [("out", out, ref)] + list(zip(["dq", "dk", "dv"], grads, [t.grad for t in leaves])):
        assert not torch.isnan(x).any(), f"{name} has NaN (unwritten or invalid)"
        err = rel_err(x, r)
        assert err < BAND[dtype], f"{name} rel err {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [8, 16, 32, 64, 128, 80])   # 8: the Path-64 model's
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen", [1000, 4096])
def test_dense_realistic(dtype, head_dim, causal, seqlen, monkeypatch):
    torch.manual_seed(seqlen + head_dim)
    tensors = _inputs(2, seqlen, 4, 2, head_dim, dtype)
    # both backward paths (a dQ pass / atomic dQ) at every shape
    deterministic = backward_path(monkeypatch, dtype == torch.float16)
    _check(lambda q, k, v: flash_attn_func(q, k, v, causal=causal, deterministic=deterministic),
           tensors, dtype, causal=causal)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_dense_16k(head_dim, monkeypatch):
    torch.manual_seed(16)
    tensors = _inputs(1, 16384, 1, 1, head_dim, torch.bfloat16)
    deterministic = backward_path(monkeypatch, head_dim == 128)
    _check(lambda q, k, v: flash_attn_func(q, k, v, causal=True, deterministic=deterministic),
           tensors, torch.bfloat16, causal=True)


@pytest.mark.parametrize("deterministic", [False, True])
def test_padding_dropout_gqa_uneven_lengths(deterministic):
    torch.manual_seed(1)
    batch, heads, seqlen = 2, 8, 1537
    tensors = _inputs(batch, seqlen, heads, 2, 64, torch.bfloat16, seqlen_k=1200)
    mask = torch.rand(batch, 1200, device="cuda") > 0.2
    state = torch.cuda.get_rng_state()  # dropout seeds are drawn on the GPU
    keep = dropout_mask(batch, heads, seqlen, 1200, 0.1, next_dropout_seed())
    fn = lambda q, k, v: flash_attn_func(q, k, v, dropout_p=0.1, causal=True, key_padding_mask=mask,
                                         deterministic=deterministic)
    out = fn(*tensors)
    assert abs(keep.float().mean().item() - 0.9) < 0.01
    torch.cuda.set_rng_state(state)
    _check(fn, tensors, torch.bfloat16, causal=True, key_padding_mask=mask, dropout_mask=keep,
           dropout_p=0.1)
    assert out.shape == (batch, seqlen, heads, 64)


def test_varlen():
    torch.manual_seed(2)
    lengths = [1, 17, 1000, 513, 2048]
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    total = sum(lengths)
    q, k, v = [torch.randn(total, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
    for b in range(len(lengths)):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        ref, _ = reference_attention(*(t[rows][None].double() for t in (q, k, v)), causal=True)
        assert rel_err(out[rows], ref[0]) < 1e-2


@pytest.mark.parametrize("window", [(-1, -1), (256, 256)])  # dense, sliding window
def test_backward_race_check_100_runs(window):
    torch.manual_seed(3)
    q, k, v = _inputs(2, 2048, 8, 2, 64, torch.bfloat16)
    g = torch.randn_like(q)
    first = None
    for _ in range(100):
        for t in (q, k, v):
            t.grad = None
        flash_attn_func(q, k, v, causal=True, deterministic=True, window_size=window).backward(g)
        grads = [t.grad.clone() for t in (q, k, v)]
        if first is None:
            first = grads
        assert all(torch.equal(a, b) for a, b in zip(first, grads))


@pytest.mark.parametrize("head_dim", [8, 64, 128])
@pytest.mark.parametrize("deterministic", [False, True])   # atomic dQ / a separate dQ pass
def test_blocksparse_butterfly(head_dim, deterministic, monkeypatch):
    torch.manual_seed(4)
    seqlen, block = 4096, 128
    layout = butterfly_layout(seqlen, block, n_factors=3).cuda()
    tensors = _inputs(2, seqlen, 4, 4, head_dim, torch.bfloat16)
    mask = layout.repeat_interleave(block, 0).repeat_interleave(block, 1)
    deterministic = backward_path(monkeypatch, deterministic)
    _check(lambda q, k, v: blocksparse_attn_func(q, k, v, layout, block_size=block, causal=True,
                                                 deterministic=deterministic),
           tensors, torch.bfloat16, causal=True, attn_mask=mask[None, None])


@pytest.mark.parametrize("padded", [False, True])
def test_blocksparse_long_rows_d128(padded, monkeypatch):
    """Non-causal rows of at least LONG_ROW_BLOCKS listed blocks take 128 x 128 forward tiles at
    d = 128 (round 28); a ragged last block and a key padding mask cross them."""
    from kernels import tuning
    torch.manual_seed(11)
    seqlen, block = 4000, 128
    layout = butterfly_layout(seqlen, block).cuda()  # all 5 factors: 6 blocks per row
    tensors = _inputs(2, seqlen, 4, 2, 128, torch.bfloat16)
    kpm = torch.ones(2, seqlen, dtype=torch.bool, device="cuda")
    if padded:
        kpm[0, 3001:] = False
    mask = (layout.repeat_interleave(block, 0).repeat_interleave(block, 1)[:seqlen, :seqlen]
            [None, None] & kpm[:, None, None, :])
    launches = record_launches(monkeypatch)
    _check(lambda q, k, v: blocksparse_attn_func(q, k, v, layout, block_size=block,
                                                 key_padding_mask=kpm if padded else None),
           tensors, torch.bfloat16, attn_mask=mask)
    forward = launches[0][1]
    assert (forward["BLOCK_M"], forward["BLOCK_N"]) == (128, 128), forward
    assert forward["TMA"] == tuning.HOST_DESCRIPTORS


@pytest.mark.parametrize("head_dim", [64, 128])
def test_tma_loads_match_pointer_loads(head_dim, monkeypatch):
    """Where the tables load tiles through TMA descriptors (d = 128 forward, d = 64 backward at
    this length), pointer loads give the same bits."""
    from kernels.attention_launch import AttentionProblem
    torch.manual_seed(9)
    q, k, v = _inputs(2, 4096, 8, 2, head_dim, torch.bfloat16)
    g = torch.randn_like(q)
    launches = record_launches(monkeypatch)

    def run():
        out = flash_attn_func(q, k, v, causal=True, deterministic=True)
        return [out, *torch.autograd.grad(out, (q, k, v), g)]
    with_tma = run()
    launched = [config["TMA"] for _, config in launches]
    assert launched == ([False, True, True] if head_dim == 64 else [True, False, False])
    monkeypatch.setattr(AttentionProblem, "tma_ready", lambda self, *tensors: False)
    without = run()
    launched = [config["TMA"] for _, config in launches]
    assert launched[3:] == [False] * 3
    assert all(torch.equal(a, b) for a, b in zip(with_tma, without))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_blocksparse_launcher_descriptors_match_pointer_loads(head_dim, monkeypatch):
    """The block-sparse forward loads K and V through descriptors the launcher makes in eager
    calls (compiled graphs take pointer loads); pointer loads give the same bits."""
    from kernels import BlockSparseIndex, tuning
    from kernels.attention_launch import AttentionProblem
    torch.manual_seed(10)
    seqlen, block = 4000, 128  # a ragged last block
    index = BlockSparseIndex.from_layout(butterfly_layout(seqlen, block, n_factors=2), block,
                                         seqlen, seqlen, causal=True, device="cuda")
    tensors = _inputs(2, seqlen, 8, 2, head_dim, torch.bfloat16)
    g = torch.randn_like(tensors[0])
    fn = lambda q, k, v: blocksparse_attn_func(q, k, v, index, block_size=block, causal=True)
    launches = record_launches(monkeypatch)

    def run(f):
        out = f(*tensors)
        return [out, *torch.autograd.grad(out, tensors, g)]
    eager = run(fn)
    assert launches[0][1]["TMA"] == tuning.HOST_DESCRIPTORS
    torch._dynamo.reset()
    eager_launches = len(launches)
    compiled = run(torch.compile(fn))
    traced = [config["TMA"] for name, config in launches[eager_launches:] if name == "fwd_kernel"]
    assert traced and all(tma == tuning.POINTER_LOADS for tma in traced)
    monkeypatch.setattr(AttentionProblem, "tma_ready", lambda self, *tensors: False)
    pointer = run(fn)
    assert launches[-3][1]["TMA"] == tuning.POINTER_LOADS
    for got in (eager, compiled):
        assert all(torch.equal(a, b) for a, b in zip(got, pointer))


def test_memory_linear_64k():
    q, k, v = _inputs(1, 65536, 16, 16, 64, torch.bfloat16)
    torch.cuda.reset_peak_memory_stats()
    flash_attn_func(q, k, v, causal=True).backward(torch.randn_like(q))
    peak = torch.cuda.max_memory_allocated() / 2**30  # inputs and gradients included
    assert peak <= 2.0, f"peak {peak:.2f} GiB"


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("seqlen,head_dim,causal", [
    (1000, 64, True), (4096, 64, True), (4096, 128, False)])  # the last two load through TMA
def test_compiled_matches_eager(mode, seqlen, head_dim, causal):
    """Compiled graphs launch the kernels themselves (and may capture them in CUDA graphs)."""
    torch.manual_seed(5)
    tensors = _inputs(2, seqlen, 8, 2, head_dim, torch.bfloat16)
    fn = lambda q, k, v: flash_attn_func(q, k, v, causal=causal)
    compiled = torch.compile(fn, mode=mode)
    g = torch.randn(2, seqlen, 8, head_dim, device="cuda", dtype=torch.bfloat16)
    expected = [fn(*tensors)]
    expected += torch.autograd.grad(expected[0], tensors, g)
    for _ in range(3):  # the later calls replay the recorded graphs
        out = compiled(*tensors)
        got = [out.clone()] + [x.clone() for x in torch.autograd.grad(out, tensors, g)]
        for x, y in zip(got, expected):
            torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_compiled_dropout_is_regenerated_in_backward():
    """Under torch.compile, the seed drawn on the GPU reaches forward and backward alike: the
    gradients match the float64 reference with the mask the call used (fallback_random makes
    the compiled draw the eager one, so the test can predict it)."""
    torch.manual_seed(6)
    batch, heads, seqlen = 2, 4, 777
    tensors = _inputs(batch, seqlen, heads, heads, 64, torch.bfloat16)
    fn = lambda q, k, v: flash_attn_func(q, k, v, dropout_p=0.2, causal=True)
    with torch._inductor.config.patch(fallback_random=True):
        compiled = torch.compile(fn)
        compiled(*tensors)  # compile first: the checked call below draws the next seed
        keep = dropout_mask(batch, heads, seqlen, seqlen, 0.2, next_dropout_seed())
        _check(compiled, tensors, torch.bfloat16, causal=True, dropout_mask=keep, dropout_p=0.2)


@pytest.mark.parametrize("packed", [False, True])
def test_compiled_attention_over_a_biased_packed_projection(packed):
    """GPT-2's q, k, v are strided views of one biased projection; Inductor may realize them in
    new buffers (it guarantees user kernels only the stride order): the op must not rely on the
    strides it saw while tracing, whether it gets the three views or the packed tensor."""
    torch.manual_seed(7)
    batch, seqlen, heads, head_dim = 4, 1024, 12, 64
    x = torch.randn(batch, seqlen, heads * head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    proj = torch.nn.Linear(heads * head_dim, 3 * heads * head_dim, device="cuda",
                           dtype=torch.bfloat16)

    def block(x):
        qkv = proj(x).view(batch, seqlen, 3, heads, head_dim)
        if packed:
            out = flash_attn_qkvpacked_func(qkv, causal=True)
        else:
            out = flash_attn_func(*qkv.unbind(dim=2), causal=True)
        return out.reshape(batch, seqlen, -1).float().square().mean()

    expected = torch.autograd.grad(block(x), [x, proj.weight, proj.bias])
    got = torch.autograd.grad(torch.compile(block)(x), [x, proj.weight, proj.bias])
    for g, e in zip(got, expected):
        assert rel_err(g, e) < 1e-2


@pytest.mark.parametrize("dropout_p,deterministic", [(0.0, True), (0.1, False), (0.1, True)])
def test_packed_qkv_matches_the_separate_views(dropout_p, deterministic):
    """One packed gradient written in place (slots 0-2 by two kernels, or dQ added with atomics)
    equals the three gradients of the separate views, bit for bit, on poisoned memory."""
    torch.manual_seed(9)
    qkv = torch.randn(4, 1024, 3, 12, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    views = [t.detach().clone().requires_grad_() for t in qkv.detach().unbind(2)]
    g = torch.randn(4, 1024, 12, 64, device="cuda", dtype=torch.bfloat16)
    kwargs = dict(causal=True, dropout_p=dropout_p, deterministic=deterministic)
    poison_allocator()
    torch.manual_seed(10)
    out = flash_attn_qkvpacked_func(qkv, **kwargs)
    dqkv, = torch.autograd.grad(out, qkv, g)
    torch.manual_seed(10)
    ref = flash_attn_func(*views, **kwargs)
    ref_grads = torch.autograd.grad(ref, views, g)
    assert torch.equal(out, ref)
    if deterministic:
        assert torch.equal(dqkv, torch.stack(ref_grads, dim=2))
    else:  # atomics add dQ in a varying order
        for slot, ref_grad in enumerate(ref_grads):
            assert not torch.isnan(dqkv[:, :, slot]).any()
            assert rel_err(dqkv[:, :, slot], ref_grad) < 1e-2


def _small_gpt(seed, vocab, batch, seqlen):
    """A 2-layer GPT with our attention on the GPU, and random token ids and targets."""
    from fa_train.models import GPT
    torch.manual_seed(seed)
    model = GPT(vocab_size=vocab, max_seq_len=seqlen, n_layer=2, n_head=4, d_model=256,
                dropout=0.0, attention="flash").cuda()
    idx, targets = (torch.randint(0, vocab, (batch, seqlen), device="cuda") for _ in range(2))
    return model, idx, targets


def test_compiled_gpt_step_matches_eager():
    model, idx, targets = _small_gpt(8, 1000, 4, 512)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        eager = model(idx, targets=targets)
        expected = torch.autograd.grad(eager, list(model.parameters()))
        compiled = torch.compile(model)(idx, targets=targets)
        got = torch.autograd.grad(compiled, list(model.parameters()))
    assert abs(compiled.item() - eager.item()) < 1e-2
    for g, e in zip(got, expected):
        assert rel_err(g, e) < 3e-2


def test_cross_entropy_at_gpt2_size():
    from kernels.cross_entropy import linear_cross_entropy
    torch.manual_seed(9)
    h = (torch.randn(8192, 768, device="cuda") * 0.5).bfloat16().requires_grad_()
    weight = (torch.randn(50304, 768, device="cuda") * 0.05).bfloat16().requires_grad_()
    targets = torch.randint(0, 50257, (8192,), device="cuda")
    targets[::7] = -100
    loss = linear_cross_entropy(h, weight, targets, vocab_size=50257)
    loss.backward()
    h64, w64 = (x.detach().double().requires_grad_() for x in (h, weight))
    ref = torch.nn.functional.cross_entropy((h64 @ w64.t())[:, :50257], targets)
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-3 * ref.item()
    assert rel_err(h.grad, h64.grad) < 1e-2 and rel_err(weight.grad, w64.grad) < 1e-2
    assert not weight.grad[50257:].any()


def test_compiled_gpt_fused_loss_matches_torch_loss():
    model, idx, targets = _small_gpt(10, 50257, 8, 256)
    results = {}
    for impl in ("fused", "torch"):
        model.config.loss_impl = impl
        torch._dynamo.reset()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.compile(model)(idx, targets=targets)
        results[impl] = loss.item(), torch.autograd.grad(loss, list(model.parameters()))
    assert abs(results["fused"][0] - results["torch"][0]) < 1e-2
    for g, e in zip(results["fused"][1], results["torch"][1]):
        assert rel_err(g, e) < 3e-2
