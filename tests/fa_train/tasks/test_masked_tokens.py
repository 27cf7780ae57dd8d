"""Masked-token self-pretraining: which tokens are hidden, that the model learns from context,
and that a classifier starts from its weights."""
import pytest
import torch

from fa_train.data.fake import FakeClassificationDataModule, _Tensors
from fa_train.errors import UserError
from fa_train.models import LRAClassifier, load_with_position_interpolation
from fa_train.tasks import MaskedTokenTask
from tests.fa_train.tasks.test_tasks import _fit


class ConstantRows(FakeClassificationDataModule):
    """Each sequence repeats one token (1..vocab-1), padded at the end: a masked token is
    predictable from any visible one, and from nothing else (chance is 1/(vocab-1))."""

    def make(self, n, g):
        ids = torch.randint(1, self.vocab_size, (n, 1), generator=g).expand(n, self.seq_len).clone()
        lengths = torch.randint(self.seq_len // 2, self.seq_len + 1, (n,), generator=g)
        mask = torch.arange(self.seq_len) < lengths[:, None]
        return _Tensors(input_ids=ids.masked_fill(~mask, 0), attention_mask=mask,
                        labels=torch.zeros(n, dtype=torch.long))


def _model(vocab_size=17, **kw):
    torch.manual_seed(0)
    return LRAClassifier(num_classes=2, vocab_size=vocab_size, max_seq_len=16, n_layer=1, n_head=2,
                         d_model=32, d_ff=32, dropout=0.0, attn_dropout=0.0, attention="standard", **kw)


def test_masked_positions_are_real_tokens_at_the_rate_asked_and_one_at_least():
    task = MaskedTokenTask(_model(), mask_prob=0.3)
    torch.manual_seed(1)
    ids = torch.randint(1, 16, (64, 16))
    real = torch.arange(16) < torch.randint(1, 17, (64, 1))
    chosen = task.masked_positions(ids, real)
    assert not (chosen & ~real).any() and chosen.any(dim=1).all()
    assert 0.25 < chosen.sum() / real.sum() < 0.4


def test_the_model_sees_the_mask_id_where_tokens_are_hidden(monkeypatch):
    task = MaskedTokenTask(_model(), mask_prob=0.5)
    seen = {}
    hidden = task.model.hidden
    monkeypatch.setattr(task.model, "hidden", lambda ids, mask: seen.setdefault("ids", ids) is None
                        or hidden(ids, mask))
    ids = torch.randint(1, 16, (4, 16))
    task.step({"input_ids": ids, "attention_mask": torch.ones(4, 16, dtype=torch.bool)}, "val")
    hid = seen["ids"] == task.mask_id
    assert hid.any() and torch.equal(seen["ids"][~hid], ids[~hid])


def test_hidden_tokens_are_learned_from_context():
    dm = ConstantRows(batch_size=16, seq_len=16, vocab_size=16, n_train=1024, n_val=64)
    task = MaskedTokenTask(_model(pool="cls"), optimizer={"name": "adamw", "lr": 3e-3},
                           scheduler={"name": "cosine", "warmup_steps": 5})
    metrics = _fit(task, dm, steps=40).callback_metrics
    assert float(metrics["val/acc"]) > 0.9        # chance: 1/15
    assert float(metrics["val/acc_majority"]) < 0.5   # 15 values about equally common


def test_the_majority_level_is_the_share_of_the_commonest_hidden_token():
    """Rows of zeros with one 5 each: every hidden token but those 5s is 0, and acc_majority is
    the share of zeros among the hidden tokens."""
    task = MaskedTokenTask(_model(), mask_prob=0.5)
    logged = {}
    task.log = lambda name, value, **kw: logged.setdefault(name, float(value))
    task.logs_now = lambda stage: True
    ids = torch.zeros(8, 16, dtype=torch.long)
    ids[:, 3] = 5
    torch.manual_seed(2)
    chosen = task.masked_positions(ids, torch.ones_like(ids, dtype=torch.bool))
    torch.manual_seed(2)   # the step draws the same positions
    task.step({"input_ids": ids}, "val")
    zeros = (ids[chosen] == 0).float().mean().item()
    assert zeros > 0.5 and logged["val/acc_majority"] == pytest.approx(zeros)


def test_the_mask_id_must_lie_past_the_datas_vocabulary():
    dm = ConstantRows(batch_size=4, seq_len=16, vocab_size=16)
    with pytest.raises(UserError, match="needs model.vocab_size=17"):
        _fit(MaskedTokenTask(_model(vocab_size=16)), dm, steps=1)
    with pytest.raises(UserError, match="task.mask_prob"):
        MaskedTokenTask(_model(), mask_prob=1.0)


def test_a_classifier_starts_from_the_pretrained_weights_without_the_mask_row():
    pretrained = _model(vocab_size=17).state_dict()
    clf = load_with_position_interpolation(_model(vocab_size=16), pretrained)
    torch.testing.assert_close(clf.embed.weight, pretrained["embed.weight"][:16])
    torch.testing.assert_close(clf.encoder.ln_f.weight, pretrained["encoder.ln_f.weight"])
