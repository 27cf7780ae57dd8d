"""Models: shapes, presets, and 'switching attention changes nothing else'."""
import os

import pytest
import torch

from fa_train.errors import UserError
from fa_train.models import (GPT, BertForPreTraining, LongDocClassifier, LRAClassifier,
                             load_with_position_interpolation, resize_position_table)
from fa_train.models.gpt import GPT2_PRESETS

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
try:
    from kernels import blocksparse_attn_func, flash_attn_func  # noqa: F401
    HAS_KERNELS = True
except ImportError:
    HAS_KERNELS = False
needs_kernels = pytest.mark.skipif(not (HAS_KERNELS and INTERPRET),
                                   reason="kernels.flash_attn_func not importable or no CUDA/TRITON_INTERPRET")


def _swap_attention(model, impl, **bs):
    from fa_train.attention import build_attention
    new = build_attention({"impl": impl, **bs})
    for m in model.modules():
        if hasattr(m, "attention"):
            m.attention = new
    return model


def test_gpt2_small_has_124m_parameters():
    with torch.device("meta"):
        m = GPT(preset="gpt2-small", vocab_size=50257, max_seq_len=1024, attention="sdpa")
    assert abs(m.num_params() - 124.4e6) < 0.5e6
    assert m.lm_head.weight is m.wte.weight
    assert set(GPT2_PRESETS) == {"gpt2-small", "gpt2-medium", "gpt2-large"}


@pytest.mark.parametrize("preset,expected", [("gpt2-medium", 354.8e6), ("gpt2-large", 774.0e6)])
def test_gpt2_preset_sizes(preset, expected):
    with torch.device("meta"):
        m = GPT(preset=preset, vocab_size=50257, max_seq_len=1024, attention="sdpa")
    assert abs(m.num_params() - expected) / expected < 0.01


def test_gpt_standard_equals_sdpa_and_checkpointing():
    torch.manual_seed(0)
    m = GPT(vocab_size=97, max_seq_len=32, n_layer=2, n_head=2, d_model=32, dropout=0.0,
            attention="standard").eval()
    idx = torch.randint(0, 97, (2, 32))
    a = m(idx)
    b = _swap_attention(m, "sdpa")(idx)
    assert a.shape == (2, 32, 97)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    m.config.activation_checkpointing = True
    m.train()
    m(idx).sum().backward()
    assert m.wte.weight.grad is not None
    with pytest.raises(ValueError, match="max_seq_len"):
        m(torch.zeros(1, 33, dtype=torch.long))


def test_gpt_without_position_embeddings_tells_order_by_causality_and_decodes_the_same():
    from tests.fa_train.inference.helpers import recompute_greedy, scaled_gpt
    m = scaled_gpt(vocab_size=97, max_seq_len=32, n_layer=2, n_head=2, d_model=32,
                   attention="sdpa", pos_emb="none")
    assert m.wpe is None and m.num_params(non_embedding=True) == m.num_params()
    idx = torch.randint(0, 97, (1, 12))
    swapped = idx.clone()
    swapped[0, [3, 4]] = idx[0, [4, 3]]
    assert not torch.allclose(m(idx)[0, -1], m(swapped)[0, -1])   # order still matters
    from fa_train.inference import Sampling, generate
    out = generate(m, [idx[0].tolist()], 6, Sampling(temperature=0.0))
    assert out.tokens[0] == recompute_greedy(m, idx[0].tolist(), 6)
    with pytest.raises(ValueError, match="model.pos_emb"):
        GPT(vocab_size=97, max_seq_len=8, n_layer=1, n_head=2, d_model=32, pos_emb="rotary")


def _documents_gpt(impl="standard", **kw):
    torch.manual_seed(0)
    return GPT(vocab_size=31, max_seq_len=16, n_layer=2, n_head=2, d_model=32, dropout=0.0,
               pos_emb="none", eot_id=0, attention=impl, **kw).eval()


@pytest.mark.parametrize("impl", ["standard", "sdpa"])
def test_document_mask_keeps_attention_inside_each_document(impl):
    masked, plain = _documents_gpt(impl, document_mask=True), _documents_gpt(impl)
    idx = torch.randint(1, 31, (2, 16))
    idx[0, [4, 9]] = 0                             # row 0: documents 0-4, 5-9, 10-15; row 1: one
    out = masked(idx)
    for row, lo, hi in [(0, 0, 5), (0, 5, 10), (0, 10, 16), (1, 0, 16)]:
        torch.testing.assert_close(out[row, lo:hi], plain(idx[row:row + 1, lo:hi])[0], atol=1e-5, rtol=1e-5)
    edited = idx.clone()
    edited[0, 6] = (idx[0, 6] % 30) + 1            # another token inside the middle document
    changed = (masked(edited) - out).abs().amax(dim=-1)[0] > 1e-6
    assert changed[6:10].all() and not changed[:6].any() and not changed[10:].any()
    assert (plain(edited) - plain(idx)).abs().amax(dim=-1)[0, 10:].gt(1e-6).all()  # without: it leaks
    masked.train()
    masked.config.activation_checkpointing = True
    masked(idx, targets=idx).backward()
    assert masked.wte.weight.grad is not None


def test_document_mask_needs_the_end_of_document_token():
    with pytest.raises(UserError, match="model.document_mask needs model.eot_id"):
        GPT(vocab_size=31, max_seq_len=16, n_layer=1, n_head=2, d_model=32, document_mask=True)
    with pytest.raises(UserError, match=r"model.eot_id=31 is invalid: expected an integer in \[0, 30\]"):
        GPT(vocab_size=31, max_seq_len=16, n_layer=1, n_head=2, d_model=32, eot_id=31)


def _bert():
    torch.manual_seed(0)
    return BertForPreTraining(vocab_size=50, max_seq_len=16, n_layer=2, n_head=2, d_model=32,
                              d_ff=64, dropout=0.0, attn_dropout=0.0, nsp=True,
                              attention="standard").eval()


@pytest.mark.parametrize("impl", ["linformer", "smyrf"])
def test_a_gpt_refuses_attention_without_a_causal_form_when_built(impl):
    with pytest.raises(UserError, match=f"attention impl '{impl}' does not support causal") as err:
        GPT(vocab_size=97, max_seq_len=16, n_layer=1, n_head=2, d_model=32,
            attention={"impl": impl})
    assert "\n" not in str(err.value)


def test_bert_padded_unpadded_and_impls_agree():
    m = _bert()
    ids = torch.randint(0, 50, (3, 16))
    mask = torch.arange(16)[None] < torch.tensor([16, 9, 4])[:, None]
    logits, nsp = m(ids, mask)
    assert logits.shape == (3, 16, 50) and nsp.shape == (3, 2)
    m.config.unpad = True  # packed path (varlen emulated by padding for non-flash impls)
    lu, _ = m(ids, mask)
    torch.testing.assert_close(lu[mask], logits[mask], atol=1e-5, rtol=1e-5)
    m.config.unpad = "auto"
    ls, _ = _swap_attention(m, "sdpa")(ids, mask)
    torch.testing.assert_close(ls[mask], logits[mask], atol=1e-5, rtol=1e-5)


def test_bert_packing_from_the_batch_replaces_unpadding(monkeypatch):
    import fa_train.models.bert as bert_module

    m = _bert()
    m.config.unpad = True
    ids = torch.randint(0, 50, (3, 16))
    mask = torch.arange(16)[None] < torch.tensor([16, 9, 4])[:, None]
    ref = m.encode(ids, mask)
    lengths = mask.sum(1, dtype=torch.int32)
    packing = (mask.flatten().nonzero().squeeze(1),
               torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)),
               int(lengths.max()))
    monkeypatch.setattr(bert_module, "unpad_input", None)  # must not be needed
    assert torch.equal(m.encode(ids, mask, packing=packing), ref)


def _lra(**kw):
    torch.manual_seed(0)
    base = dict(num_classes=3, vocab_size=20, max_seq_len=64, n_layer=2, n_head=2, d_model=32,
                d_ff=64, dropout=0.0, attn_dropout=0.0, attention="standard")
    base.update(kw)
    return LRAClassifier(**base).eval()


@pytest.mark.parametrize("kw", [dict(pool="cls"), dict(pool="mean", pos_emb="sinusoidal"),
                                dict(input_type="pixel", image_size=8),
                                dict(num_towers=2)])
def test_lra_classifier_variants_and_impls_agree(kw):
    m = _lra(**kw)
    shape = (2, 2, 64) if kw.get("num_towers") == 2 else (2, 64)
    ids = torch.randint(1, 20, shape)
    mask = torch.ones(shape, dtype=torch.bool)
    mask[..., 40:] = False
    out = m(ids, mask)
    assert out.shape == (2, 3)
    torch.testing.assert_close(_swap_attention(m, "sdpa")(ids, mask), out, atol=1e-5, rtol=1e-5)


def test_lra_classifier_never_reads_a_tensor_back_to_the_host(monkeypatch):
    """A host read in the forward (bool(), item()) waits for the GPU every step, so the host's
    work between steps cannot overlap it: the model passes masks on as they come; the data side
    sends None when nothing is padding. An all-true mask gives the same logits as None."""
    m = _lra(pool="mean")
    ids = torch.randint(1, 20, (2, 64))
    full = torch.ones(2, 64, dtype=torch.bool)
    reads = []
    for name in ("__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda t, *a, _o=original, _n=name, **k: reads.append(_n) or _o(t, *a, **k))
    out = m(ids, full)
    monkeypatch.undo()
    assert not reads, reads
    torch.testing.assert_close(out, m(ids), atol=1e-5, rtol=1e-5)


def test_lra_pad_token_masking_ignores_black_pixels():
    """With mask_pad_tokens, pixels equal to the pad id neither attend nor enter the mean pool:
    the logits equal those of an explicit padding mask, whatever the pad token's embedding."""
    m = _lra(pool="mean", mask_pad_tokens=True, vocab_size=256)
    ids = torch.randint(1, 256, (2, 64))
    ids[:, 50:] = 0
    explicit = torch.ones(2, 64, dtype=torch.bool)
    explicit[:, 50:] = False
    torch.testing.assert_close(m(ids), m(ids, explicit))
    with torch.no_grad():
        m.embed.weight[0].normal_()          # the pad token's embedding is never used
    torch.testing.assert_close(m(ids), m(ids, explicit))
    assert not torch.allclose(_lra(pool="mean", vocab_size=256)(ids), m(ids))


def test_lra_embedding_init_scale():
    assert abs(float(_lra(embed_init_std=1.0).embed.weight.detach().std()) - 1.0) < 0.15
    assert float(_lra().embed.weight.detach().std()) < 0.05
    with pytest.raises(ValueError, match="embed_init_std"):
        _lra(embed_init_std=0.0)


def test_a_tanh_head_keeps_a_gradient_where_a_relu_head_has_died():
    """The head's activation (model.head_activation): the same weights and names either way, so
    a ReLU run's checkpoint loads; with every first-layer unit pushed below zero for every input,
    no gradient passes a ReLU head, while a tanh head still passes one to the encoder."""
    relu, tanh = _lra(), _lra(head_activation="tanh")
    assert isinstance(tanh.head[1], torch.nn.Tanh) and isinstance(relu.head[1], torch.nn.ReLU)
    tanh.load_state_dict(relu.state_dict())
    ids = torch.randint(1, 20, (4, 64))
    for m in (relu, tanh):
        with torch.no_grad():
            m.head[0].bias.fill_(-3.0)               # every unit below zero for every input
        m.zero_grad()
        m(ids).logsumexp(-1).sum().backward()
    assert relu.embed.weight.grad.abs().max() == 0
    assert tanh.embed.weight.grad.abs().max() > 0
    with pytest.raises(UserError, match=r"model.head_activation='gelu' is invalid: expected one "
                                        r"of relu, tanh"):
        _lra(head_activation="gelu")


def test_position_table_interpolation_for_path_transfer():
    src = _lra(max_seq_len=16, image_size=4)
    dst = _lra(max_seq_len=64, image_size=8)
    sd = src.state_dict()
    load_with_position_interpolation(dst, sd)
    torch.testing.assert_close(dst.cls_pos, src.cls_pos)
    assert dst.pos_table.shape == (64, 32)
    const = torch.ones(16, 5)
    torch.testing.assert_close(resize_position_table(const, 8), torch.ones(64, 5))


def test_image_size_must_match_the_sequence_length():
    with pytest.raises(UserError, match=r"model.image_size=128 is a grid of 16384 positions but "
                                        r"sequences have 64 \(model.max_seq_len\)"):
        _lra(image_size=128)


def test_longdoc_repeats_position_table():
    m = LongDocClassifier(num_classes=5, vocab_size=30, max_seq_len=40, n_layer=1, n_head=2,
                          d_model=16, d_ff=32, position_repeat_base=16, attention="sdpa").eval()
    assert m.config.multi_label and not m.config.prenorm
    torch.testing.assert_close(m.pos_table[16:32], m.pos_table[:16])
    out = m(torch.randint(0, 30, (2, 40)), torch.ones(2, 40, dtype=torch.bool))
    assert out.shape == (2, 5)


@needs_kernels
def test_flash_and_blocksparse_models_match_standard_under_interpreter():
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = GPT(vocab_size=31, max_seq_len=32, n_layer=1, n_head=2, d_model=32, dropout=0.0,
            attention="standard").to(dev).eval()
    idx = torch.randint(0, 31, (2, 32), device=dev)
    ref = g(idx)
    torch.testing.assert_close(_swap_attention(g, "flash")(idx), ref, atol=2e-3, rtol=2e-3)
    # a dense block-sparse layout (one block group) is exact attention
    dense = _swap_attention(g, "blocksparse", block_size=16, global_size=2)(idx)
    torch.testing.assert_close(dense, ref, atol=2e-3, rtol=2e-3)
    b = _bert().to(dev)
    ids = torch.randint(0, 50, (2, 16), device=dev)
    mask = torch.arange(16, device=dev)[None] < torch.tensor([16, 7], device=dev)[:, None]
    ref, _ = b(ids, mask)
    out, _ = _swap_attention(b, "flash")(ids, mask)  # unpadded varlen path
    torch.testing.assert_close(out[mask], ref[mask], atol=2e-3, rtol=2e-3)
    idx = torch.randint(1, 31, (2, 16), device=dev)
    idx[0, [5, 11]] = 0                             # documents: the packed (varlen) path
    documents = _documents_gpt(document_mask=True).to(dev)
    ref = documents(idx)
    torch.testing.assert_close(_swap_attention(documents, "flash")(idx), ref, atol=2e-3, rtol=2e-3)


@needs_kernels
def test_compiled_bert_encoder_stays_padded_in_one_graph(monkeypatch):
    """Under torch.compile the flash BERT keeps the padded layout (a key-padding mask) instead of
    unpadding, whose data-dependent token count would break the graph; same hidden states."""
    import fa_train.models.bert as bert_module

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    b = _swap_attention(_bert().to(dev), "flash")
    ids = torch.randint(0, 50, (2, 16), device=dev)
    mask = torch.arange(16, device=dev)[None] < torch.tensor([16, 7], device=dev)[:, None]
    eager = b.encode(ids, mask)  # unpadded
    unpads, unpad = [], bert_module.unpad_input
    monkeypatch.setattr(bert_module, "unpad_input", lambda *a: unpads.append(1) or unpad(*a))
    torch._dynamo.reset()
    compiled = torch.compile(b.encode, backend="eager", fullgraph=True)(ids, mask)
    assert not unpads
    torch.testing.assert_close(compiled[mask], eager[mask], atol=2e-3, rtol=2e-3)


def test_gpt_loss_in_graph_matches_logits_and_ignores_vocab_padding():
    torch.manual_seed(0)
    m = GPT(vocab_size=97, max_seq_len=16, n_layer=1, n_head=2, d_model=32, dropout=0.0,
            attention="sdpa").eval()
    assert m.wte.num_embeddings == 128 and m.num_params() == sum(
        p.numel() for p in m.parameters()) - 31 * 32
    idx = torch.randint(0, 97, (2, 16))
    targets = torch.randint(0, 97, (2, 16))
    targets[0, :5] = -100
    logits = m(idx)
    assert logits.shape == (2, 16, 97)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), targets.reshape(-1),
                                                 ignore_index=-100)
    torch.testing.assert_close(m(idx, targets=targets), expected)
    with pytest.raises(ValueError, match="vocab_multiple"):
        GPT(vocab_size=97, max_seq_len=16, n_layer=1, n_head=2, d_model=32, vocab_multiple=0)


def test_gpt_fused_loss_matches_torch_loss():
    torch.manual_seed(0)
    m = GPT(vocab_size=97, max_seq_len=16, n_layer=1, n_head=2, d_model=32, dropout=0.0,
            attention="sdpa", loss_impl="fused")
    idx, targets = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    targets[1, 3:9] = -100
    fused = torch.compile(m, backend="aot_eager", fullgraph=True)(idx, targets=targets)
    got = torch.autograd.grad(fused, list(m.parameters()))
    m.config.loss_impl = "torch"
    expected_loss = m(idx, targets=targets)
    expected = torch.autograd.grad(expected_loss, list(m.parameters()))
    torch.testing.assert_close(fused, expected_loss)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="loss_impl"):
        GPT(vocab_size=97, max_seq_len=16, n_layer=1, n_head=2, d_model=32, loss_impl="fast")
