"""The paper's approximate and sparse baselines: each pinned by a property against exact attention
(float64 references on fresh random inputs), gradients, one-line errors, model integration."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

from fa_train.attention import build_attention
from kernels import reference_attention

APPROXIMATE = ("linformer", "linear", "performer", "reformer", "smyrf")
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(b=2, n=37, h=2, d=8, seed=0, dtype=torch.float64, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, n, h, d, generator=g, dtype=dtype) * scale for _ in range(3)]


def _mask(n, lengths):
    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]


def _build(impl, n=37, **options):
    return build_attention({"impl": impl, **options}, max_seq_len=n)


def _exact_scores(q, k, v, scores, keep):
    """softmax(scores) v with masked-out pairs removed, (B, N, H, d); scores (B, H, N, N)."""
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


def _keep(b, h, n, causal, kpm):
    keep = torch.ones(b, h, n, n, dtype=torch.bool)
    if causal:
        keep &= torch.ones(n, n, dtype=torch.bool).tril()
    if kpm is not None:
        keep &= kpm[:, None, None, :]
    return keep


@pytest.mark.parametrize("impl", APPROXIMATE)
def test_shapes_dtype_and_gradients_flow(impl):
    q, k, v = (t.float().requires_grad_() for t in _qkv(n=24))
    attn = _build(impl, n=24, **({"bucket_size": 8} if impl == "reformer" else {}))
    kpm = _mask(24, [24, 17])
    out = attn(q, k, v, key_padding_mask=kpm)
    assert out.shape == q.shape and out.dtype == q.dtype and torch.isfinite(out).all()
    out.square().sum().backward()
    read = (q, v) if impl == "reformer" else (q, k, v)  # reformer: keys are the queries
    for t in read:
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    if impl == "linformer":
        assert attn.E.grad.abs().sum() > 0 and attn.F.grad.abs().sum() > 0
    half = attn(*(t.detach().bfloat16() for t in (q, k, v)), key_padding_mask=kpm)
    assert half.dtype == torch.bfloat16 and torch.isfinite(half).all()
    if impl in ("linformer", "linear"):  # the others draw at random
        torch.testing.assert_close(half.float(), out.detach(), atol=0.1, rtol=0.1)


def test_linformer_with_k_n_and_identity_projections_is_exact_attention():
    q, k, v = _qkv()
    attn = _build("linformer", k=37)
    with torch.no_grad():
        attn.E.copy_(torch.eye(37))
        attn.F.copy_(torch.eye(37))
    ref, _ = reference_attention(q, k, v)
    torch.testing.assert_close(attn(q, k, v), ref)
    attn = _build("linformer", k=20)  # shorter inputs use the first N columns
    with torch.no_grad():
        attn.E[:, :20], attn.F[:, :20] = torch.eye(20), torch.eye(20)
    q, k, v = (t[:, :20] for t in (q, k, v))
    torch.testing.assert_close(attn(q, k, v), reference_attention(q, k, v)[0])


def test_linformer_projections_are_model_parameters():
    from fa_train.models import LRAClassifier
    model = LRAClassifier(num_classes=2, vocab_size=16, max_seq_len=32, n_layer=2, n_head=2,
                          d_model=16, d_ff=16, attention={"impl": "linformer", "k": 8})
    attn = model.attention
    assert attn.E.shape == (8, 33)  # 32 tokens + CLS
    names = {n for n, p in model.named_parameters() if p is attn.E or p is attn.F}
    assert names == {"attention.E", "attention.F"}  # one pair, shared by the layers
    model(torch.randint(1, 16, (2, 32))).sum().backward()
    assert attn.E.grad is not None and attn.E.grad.abs().sum() > 0
    state = model.state_dict()
    again = LRAClassifier(num_classes=2, vocab_size=16, max_seq_len=32, n_layer=2, n_head=2,
                          d_model=16, d_ff=16, attention={"impl": "linformer", "k": 8})
    again.load_state_dict(state)
    assert torch.equal(again.attention.E, attn.E)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", [8, 64])
def test_linear_attention_equals_its_masked_quadratic_form(causal, chunk):
    q, k, v = _qkv()
    kpm = _mask(37, [37, 23])
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    weights = torch.einsum("bqhm,bkhm->bhqk", phi_q, phi_k) * _keep(2, 2, 37, causal, kpm)
    want = torch.einsum("bhqk,bkhd->bqhd", weights / weights.sum(-1, keepdim=True), v)
    got = _build("linear", chunk_size=chunk)(q, k, v, causal=causal, key_padding_mask=kpm)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("causal", [False, True])
def test_performer_converges_to_softmax_attention_as_features_grow(causal):
    q, k, v = _qkv(n=16, d=8, scale=0.5)
    ref, _ = reference_attention(q, k, v, causal=causal)
    errors = {}
    for m in (8, 64, 4096):
        torch.manual_seed(0)
        out = _build("performer", nb_features=m, chunk_size=8)(q, k, v, causal=causal)
        errors[m] = (out - ref).abs().mean().item()
    assert errors[4096] < 0.02 < errors[8]
    assert errors[4096] < errors[64] < errors[8]


@pytest.mark.parametrize("causal", [False, True])
def test_performer_gradients_stay_finite_when_queries_and_keys_barely_overlap(causal):
    # long queries and keys pointing opposite ways: phi_q . phi_k ~ exp(-|q| |k| / sqrt(d)),
    # near or below float32's smallest normal, where the backward of num / den overflowed
    q, k, v = _qkv(n=16, dtype=torch.float32)
    direction = F.normalize(torch.randn(8, generator=torch.Generator().manual_seed(0)), dim=0)
    for norm in torch.arange(28.0, 40.0, 0.5).tolist():
        qn, kn, vn = (t.detach().clone().requires_grad_() for t in
                      (norm * direction + 0.1 * q, -norm * direction + 0.1 * k, v))
        torch.manual_seed(0)
        out = _build("performer", nb_features=32, chunk_size=8)(qn, kn, vn, causal=causal)
        out.square().sum().backward()
        for t in (out, qn.grad, kn.grad, vn.grad):
            assert torch.isfinite(t).all(), norm


def test_performer_features_are_orthogonal_and_redrawn_on_schedule():
    from fa_train.attention.performer import orthogonal_gaussian
    w = orthogonal_gaussian(12, 8, torch.Generator().manual_seed(0))
    unit = w / w.norm(dim=1, keepdim=True)
    torch.testing.assert_close(unit[:8] @ unit[:8].T, torch.eye(8), atol=1e-5, rtol=0)
    q, k, v = _qkv(n=8, dtype=torch.float32)
    attn = _build("performer", nb_features=8, redraw_interval=2)
    attn.start_train_step(0)
    attn(q, k, v)                 # the first call draws
    first = attn.features.clone()
    for _ in range(3):            # calls within a step (one per layer) keep the features
        attn(q, k, v)
    attn.start_train_step(1)
    assert torch.equal(attn.features, first)
    attn.start_train_step(2)      # step 2 opens the next period: redrawn once
    second = attn.features.clone()
    assert not torch.equal(second, first)
    attn.start_train_step(2)      # a second micro-batch of step 2 (gradient accumulation)
    attn.start_train_step(3)
    attn(q, k, v)
    assert torch.equal(attn.features, second)
    assert "features" not in attn.state_dict()


def test_performer_resumed_mid_period_draws_once():
    q, k, v = _qkv(n=8, dtype=torch.float32)
    attn = _build("performer", nb_features=8, redraw_interval=4)
    attn.start_train_step(5)      # a run resumed at step 5: nothing drawn yet
    attn(q, k, v)
    drawn = attn.features.clone()
    attn.start_train_step(6)
    assert torch.equal(attn.features, drawn)
    attn.start_train_step(8)
    assert not torch.equal(attn.features, drawn)


def _shared_qk_attention(q, v, causal, kpm):
    """Exact attention of the Reformer's shared-QK form: keys are unit queries, a token scores
    -5e4 against itself."""
    n = q.shape[1]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, F.normalize(q, dim=-1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.eye(n, dtype=torch.bool), -5e4)
    return _exact_scores(q, None, v, scores, _keep(q.shape[0], q.shape[2], n, causal, kpm))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("options", [
    dict(n_buckets=1, bucket_size=64, n_hashes=1),   # one bucket, one chunk
    dict(n_buckets=1, bucket_size=64, n_hashes=3),   # rounds over the same keys
])
def test_reformer_with_one_bucket_is_exact_shared_qk_attention(causal, options):
    q, k, v = _qkv()
    kpm = _mask(37, [37, 30])
    got = _build("reformer", **options)(q, k, v, causal=causal, key_padding_mask=kpm)
    torch.testing.assert_close(got, _shared_qk_attention(q, v, causal, kpm))


@pytest.mark.parametrize("impl, options", [
    ("reformer", dict(bucket_size=4, n_hashes=3)), ("reformer", dict(bucket_size=5, n_buckets=2)),
    ("smyrf", dict(cluster_size=6, n_hashes=3)),
])
def test_bucketed_outputs_are_averages_of_visible_values(impl, options):
    q, k, _ = _qkv()
    v = torch.ones_like(q)
    out = _build(impl, **options)(q, k, v)
    torch.testing.assert_close(out, torch.ones_like(out))  # weights of each query sum to one
    v = torch.randn_like(q)
    out = _build(impl, **options)(q, k, v)  # within the values' range, not exact attention
    assert (out.amax(1) <= v.amax(1) + 1e-9).all() and (out.amin(1) >= v.amin(1) - 1e-9).all()
    assert not torch.allclose(out, reference_attention(q, k, v)[0], atol=1e-3)


def test_reformer_never_attends_to_padding_or_the_future():
    q, k, v = _qkv(n=32)
    v[:, 20:] = 1e6  # padding: any weight on it would show
    kpm = _mask(32, [20, 20])
    out = _build("reformer", bucket_size=4, n_hashes=2)(q, k, v, key_padding_mask=kpm)
    assert out.abs().max() < 100
    v = torch.arange(32, dtype=q.dtype)[None, :, None, None].expand_as(q)
    out = _build("reformer", bucket_size=4, n_hashes=2)(q, k, v, causal=True)
    assert (out[..., 0] <= torch.arange(32)[None, :, None] + 1e-9).all()


def test_smyrf_with_one_cluster_is_exact_attention():
    q, k, v = _qkv()
    kpm = _mask(37, [37, 26])
    got = _build("smyrf", cluster_size=64, n_hashes=2)(q, k, v, key_padding_mask=kpm)
    torch.testing.assert_close(got, reference_attention(q, k, v, key_padding_mask=kpm)[0])


def test_smyrf_hashes_put_large_inner_products_in_one_cluster():
    from fa_train.attention.smyrf import asymmetric_hashes
    g = torch.Generator().manual_seed(1)
    k = torch.randn(1, 1, 64, 8, generator=g, dtype=torch.float64)
    q = k + 0.05 * torch.randn(1, 1, 64, 8, generator=g, dtype=torch.float64)  # q_i near k_i
    torch.manual_seed(0)
    q_hash, k_hash = asymmetric_hashes(q, k, n_hashes=8)
    q_cluster = q_hash.argsort(-1).argsort(-1) // 8  # rank // cluster size
    k_cluster = k_hash.argsort(-1).argsort(-1) // 8
    assert (q_cluster == k_cluster).double().mean() > 0.4  # chance: 1/8


@pytest.mark.parametrize("impl, call, message", [
    ("linformer", dict(causal=True), "'linformer' does not support causal masking"),
    ("smyrf", dict(causal=True), "'smyrf' does not support causal masking"),
    ("linear", dict(dropout_p=0.1), "'linear' does not support dropout"),
    ("performer", dict(dropout_p=0.1), "'performer' does not support dropout"),
    ("linear", dict(softmax_scale=0.5), "'linear' has no softmax: softmax_scale must be None"),
])
def test_unsupported_calls_fail_in_one_line(impl, call, message):
    q, k, v = _qkv(n=16)
    with pytest.raises(ValueError, match=message) as err:
        _build(impl, n=16)(q, k, v, **call)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("build, message", [
    (lambda: build_attention("linformer"), "'linformer' needs max_seq_len"),
    (lambda: _build("linformer", k=0), r"attention.k=0 is invalid: expected an integer >= 1"),
    (lambda: _build("reformer", n_buckets=3), "attention.n_buckets must be 1 or even"),
    (lambda: _build("reformer", bucket_size=0), "attention.bucket_size=0 is invalid: expected an"),
    (lambda: _build("performer", nb_features=2.5), "attention.nb_features=2.5 is invalid"),
    (lambda: _build("performer", redraw_interval=-1), "attention.redraw_interval=-1 is invalid"),
    (lambda: _build("performer", feature_eps=-1e-4),
     r"attention.feature_eps=-0.0001 is invalid: expected a number in \[0, inf\)"),
    (lambda: _build("performer", feature_eps="tiny"), "attention.feature_eps='tiny' is invalid"),
    (lambda: _build("smyrf", n_hashes=0), "attention.n_hashes=0 is invalid: expected an integer"),
    (lambda: _build("linear", chunk_size=-1), "attention.chunk_size=-1 is invalid"),
    (lambda: _build("linformer", n=16)(*_qkv(n=17)), "at most max_seq_len = 16 tokens, got 17"),
])
def test_bad_options_fail_in_one_line(build, message):
    with pytest.raises(ValueError, match=message) as err:
        build()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("impl", ["linear", "performer", "reformer"])
def test_causal_models_train_with_the_causal_forms(impl):
    from fa_train.models.gpt import GPT
    torch.manual_seed(0)
    model = GPT(vocab_size=32, max_seq_len=16, n_layer=1, n_head=2, d_model=16, dropout=0.0,
                attention={"impl": impl, "bucket_size": 4, "chunk_size": 4})
    idx = torch.randint(0, 32, (2, 16))
    logits = model(idx)
    logits.sum().backward()
    assert torch.isfinite(logits).all()
    # position 5 must not see token 10
    changed = idx.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 32
    if impl != "reformer":  # reformer's hashing is random per call
        torch.testing.assert_close(model(changed)[:, :10], logits[:, :10])


# ---- sparse baselines: block layouts run by the block-sparse kernel ---------------------------

@pytest.mark.skipif(not INTERPRET, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", [
    dict(layout="longformer", local_window=1, global_size=1),
    dict(layout="bigbird", local_window=1, global_size=1, random_blocks=1, random_seed=5),
    dict(layout="fixed", stride=2, summary_size=1),
    dict(layout="strided", stride=3),
])
def test_sparse_layouts_equal_dense_attention_with_the_same_mask(layout, causal):
    """Output and dq, dk, dv of the block-sparse kernel against float64 dense masked attention."""
    attn = build_attention({"impl": "blocksparse", "block_size": 16, **layout})
    g = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(1, 96, 1, 16, generator=g).to(DEV) for _ in range(4))
    leaves = [x.requires_grad_() for x in (q, k, v)]
    refs = [x.detach().double().requires_grad_() for x in leaves]
    out = attn(*leaves, causal=causal)
    blocks = attn.config.build(96)
    mask = blocks.repeat_interleave(16, 0).repeat_interleave(16, 1).to(DEV)
    assert 0 < blocks.float().mean() < 1
    ref, _ = reference_attention(*refs, causal=causal, attn_mask=mask[None, None])
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
    grads = torch.autograd.grad(out, leaves, dout)
    ref_grads = torch.autograd.grad(ref, refs, dout.double())
    for name, got, want in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=2e-3,
                                   msg=lambda m, name=name: f"d{name}: {m}")
