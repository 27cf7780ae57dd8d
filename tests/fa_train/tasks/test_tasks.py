"""Tasks: schedules, optimizers, and a few real optimization steps on CPU."""
import math

import lightning as L
import pytest
import torch

from fa_train.models import GPT, BertForPreTraining, LRAClassifier
from fa_train.tasks import ClassificationTask, LanguageModelingTask, MaskedLMTask
from fa_train.tasks.optim import Lamb, build_optimizer, lr_multiplier
from fa_train.data.fake import (FakeClassificationDataModule, FakeLMDataModule,
                                      FakeMLMDataModule)


def test_rsqrt_is_the_lra_form():
    w = 1000
    for step in (1, 10, 999, 1000, 4000):
        expect = min(1.0, step / w) / math.sqrt(max(step, w))
        assert lr_multiplier(step, "rsqrt", warmup_steps=w) == pytest.approx(expect)


def test_cosine_and_linear_warmup_and_decay():
    assert lr_multiplier(0, "cosine", 10, 110) == pytest.approx(0.1)
    assert lr_multiplier(9, "cosine", 10, 110) == pytest.approx(1.0)
    assert lr_multiplier(60, "cosine", 10, 110) == pytest.approx(0.5)
    assert lr_multiplier(110, "cosine", 10, 110, min_lr_ratio=0.1) == pytest.approx(0.1)
    assert lr_multiplier(60, "linear", 10, 110) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="valid choices"):
        lr_multiplier(0, "exp")


def test_optimizers():
    p = torch.nn.Parameter(torch.ones(4, 4))
    p.grad = torch.ones(4, 4)
    opt = build_optimizer([p], name="lamb", lr=0.1, weight_decay=0.01)
    assert isinstance(opt, Lamb)
    opt.step()
    assert (p < 1).all()
    assert isinstance(build_optimizer([p], name="adamw", fused=False), torch.optim.AdamW)
    with pytest.raises(ValueError, match="valid choices"):
        build_optimizer([p], name="sgdx")


def _lamb_reference(params, grads_per_step, lr, betas, eps, weight_decay):
    """LAMB written out tensor by tensor, as in the paper's Algorithm 2."""
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, (p, g) in enumerate(zip(params, grads)):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            update = (m[i] / (1 - betas[0] ** t)) / ((v[i] / (1 - betas[1] ** t)).sqrt() + eps)
            update = update + weight_decay * p
            w_norm, u_norm = p.norm(), update.norm()
            trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            params[i] = p - lr * trust * update
    return params


def test_lamb_matches_the_per_tensor_algorithm():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((8, 4), (4,), (3, 3, 2))]
    params.append(torch.nn.Parameter(torch.zeros(5)))  # zero weights: trust ratio 1
    start = [p.detach().clone() for p in params]
    grads_per_step = [[torch.randn_like(p) for p in params] for _ in range(3)]
    opt = Lamb(params, lr=0.05, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    expected = _lamb_reference(start, grads_per_step, 0.05, (0.9, 0.99), 1e-6, 0.01)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)


def _fit(task, dm, steps=30, **kw):
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=2, val_check_interval=steps, **kw)
    trainer.fit(task, datamodule=dm)
    return trainer


def _fit_counting_lm(seq_len, **task_kw):
    """A one-layer GPT fitted 30 steps on counting sequences: (task, its trainer's metrics)."""
    torch.manual_seed(0)
    dm = FakeLMDataModule(batch_size=8, seq_len=seq_len, vocab_size=32, n_train=256)
    model = GPT(vocab_size=32, max_seq_len=seq_len, n_layer=1, n_head=2, d_model=32, dropout=0.0,
                attention="sdpa")
    task = LanguageModelingTask(model, optimizer={"name": "adamw", "lr": 1e-2},
                                scheduler={"name": "cosine", "warmup_steps": 5}, **task_kw)
    return task, _fit(task, dm, steps=30).callback_metrics


def test_lm_task_learns_and_logs_ppl():
    task, m = _fit_counting_lm(16)
    assert m["val/ppl"] == pytest.approx(math.exp(float(m["val/loss"])), rel=1e-4)
    assert float(m["val/loss"]) < math.log(32) * 0.8
    assert task.tokens_seen == 30 * 8 * 16


def test_loss_by_position_buckets_each_tokens_loss_by_its_position():
    """Logits that predict the label with certainty from position 6 on, uniformly before it: the
    buckets 0-1, 1-2, 2-4 and 4-8 (half certain) and 8-12 hold log(V), log(V), log(V), log(V)/2, 0;
    ignored labels count nowhere."""
    task = LanguageModelingTask(GPT(vocab_size=8, max_seq_len=12, n_layer=1, n_head=1, d_model=8),
                                loss_by_position=True)
    y = torch.randint(0, 8, (3, 12))
    logits = torch.zeros(3, 12, 8)
    logits[:, 6:].scatter_(2, y[:, 6:, None], 1e4)
    y[0, 0] = -100
    loss = task._loss_by_position("val", logits, y)
    sums, length = task._position_sums["val"]
    assert length == 12 and sums[1].tolist() == [2, 3, 6, 12, 12]
    v = math.log(8)
    assert (sums[0] / sums[1]).tolist() == pytest.approx([v, v, v, v / 2, 0.0], abs=1e-5)
    assert float(loss) == pytest.approx((2 + 3 + 6 + 6) * v / 35, rel=1e-5)


def test_lm_task_logs_the_loss_by_position_in_the_window():
    """Through a fit: one key per bucket, and their token-weighted mean is the validation loss."""
    _, m = _fit_counting_lm(12, loss_by_position=True)
    spans = {"0-1": 1, "1-2": 1, "2-4": 2, "4-8": 4, "8-12": 4}
    assert {k for k in m if k.startswith("val/loss_pos")} == {f"val/loss_pos{s}" for s in spans}
    mean = sum(float(m[f"val/loss_pos{s}"]) * n for s, n in spans.items()) / 12
    assert float(m["val/loss"]) == pytest.approx(mean, rel=1e-4)
    assert float(m["val/ppl"]) == pytest.approx(math.exp(mean), rel=1e-4)


def test_compile_mode_is_checked_and_reaches_torch_compile(monkeypatch):
    model = GPT(vocab_size=32, max_seq_len=16, n_layer=1, n_head=2, d_model=32, attention="sdpa")
    with pytest.raises(ValueError, match="compile_mode"):
        LanguageModelingTask(model, compile=True, compile_mode="fastest")
    modes = []
    monkeypatch.setattr(torch, "compile", lambda module, mode=None: modes.append(mode) or module)
    LanguageModelingTask(model, compile=True, compile_mode="reduce-overhead").configure_model()
    assert modes == ["reduce-overhead"]


def test_training_steps_log_no_python_numbers(monkeypatch):
    """Lightning turns a logged Python number into a tensor on the model's device: on a GPU a
    blocking copy that drains the queue every step. Training-step logging must pass tensors."""
    from fa_train.callbacks import PerfMonitor
    logged = []
    original = L.LightningModule.log

    def spy(self, name, value, *args, **kwargs):
        if self.trainer.training:
            logged.append((name, type(value)))
        return original(self, name, value, *args, **kwargs)

    monkeypatch.setattr(L.LightningModule, "log", spy)
    dm = FakeLMDataModule(batch_size=2, seq_len=8, vocab_size=16, n_train=64)
    model = GPT(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=16, attention="sdpa")
    task = LanguageModelingTask(model, scheduler={"name": "cosine", "warmup_steps": 2})
    _fit(task, dm, steps=6, log_every_n_steps=2,
         callbacks=[PerfMonitor(warmup_steps=1, log_every_n_steps=2)])
    names = {name for name, _ in logged}
    assert {"train/loss", "train/lr", "perf/tokens_per_sec_per_device"} <= names
    assert all(issubclass(kind, torch.Tensor) for _, kind in logged), logged


@pytest.mark.parametrize("kind", ["lm", "classification"])
def test_training_steps_log_only_at_the_steps_lightning_writes(monkeypatch, kind):
    """Each self.log costs host time and Lightning keeps only every log_every_n_steps-th step's
    values: the per-step metrics (loss, accuracy, lr, tokens) are logged at those steps alone."""
    from fa_train.callbacks import TrainingClock
    logged = []
    original = L.LightningModule.log

    def spy(self, name, value, *args, **kwargs):
        if self.trainer.training and not self.trainer.validating:
            logged.append((self.trainer.global_step, name))
        return original(self, name, value, *args, **kwargs)

    monkeypatch.setattr(L.LightningModule, "log", spy)
    if kind == "lm":
        dm = FakeLMDataModule(batch_size=2, seq_len=8, vocab_size=16, n_train=64)
        model = GPT(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=16, attention="sdpa")
        task = LanguageModelingTask(model, scheduler={"name": "cosine", "warmup_steps": 2})
    else:
        dm = FakeClassificationDataModule(batch_size=4, seq_len=16, vocab_size=20, num_classes=4)
        model = LRAClassifier(num_classes=4, vocab_size=20, max_seq_len=16, n_layer=1, n_head=2,
                              d_model=16, d_ff=32, attention="sdpa")
        task = ClassificationTask(model, scheduler={"name": "rsqrt", "warmup_steps": 2})
    _fit(task, dm, steps=7, log_every_n_steps=3, callbacks=[TrainingClock()])
    steps = {name: sorted(s for s, n in logged if n == name) for _, name in logged}
    for name in ("train/loss", "train/lr") + (("train/acc",) if kind != "lm" else ()):
        assert steps[name] == [2, 5], (name, steps)  # batches 3 and 6, before their optimizer step
    assert steps["tokens_seen"] == [3, 6], steps      # the same batches, after it


def test_mlm_task_masked_accuracy():
    dm = FakeMLMDataModule(batch_size=4, seq_len=16, vocab_size=40)
    model = BertForPreTraining(vocab_size=40, max_seq_len=16, n_layer=1, n_head=2, d_model=32,
                               d_ff=64, nsp=True, attention="sdpa")
    task = MaskedLMTask(model, optimizer={"name": "lamb", "lr": 1e-3})
    t = _fit(task, dm, steps=3)
    assert 0.0 <= float(t.callback_metrics["val/mlm_acc"]) <= 1.0


def test_mlm_task_positions_given_or_found_give_the_same_loss():
    dm = FakeMLMDataModule(batch_size=4, seq_len=16, vocab_size=40)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    model = BertForPreTraining(vocab_size=40, max_seq_len=16, n_layer=1, n_head=2, d_model=32,
                               d_ff=64, nsp=True, attention="sdpa").eval()
    task = MaskedLMTask(model)
    task.log = lambda *args, **kwargs: None
    labels = batch["labels"]
    positions = (labels.flatten() != -100).nonzero().squeeze(1)
    assert torch.equal(task.step(dict(batch), "val"),
                       task.step({**batch, "mlm_positions": positions}, "val"))
    half = positions[: len(positions) // 2]  # the head sees only the listed positions
    half_labels = torch.full_like(labels, -100).flatten()
    half_labels[half] = labels.flatten()[half]
    assert torch.equal(task.step({**batch, "mlm_positions": half}, "val"),
                       task.step({**batch, "labels": half_labels.view_as(labels)}, "val"))
    model.config.unpad = True  # the encoder unpads with the batch's packing where it has one
    lengths = batch["attention_mask"].sum(1, dtype=torch.int32)
    packing = {"token_positions": batch["attention_mask"].flatten().nonzero().squeeze(1),
               "cu_seqlens": torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)),
               "max_seqlen": int(lengths.max())}
    unpadded = task.step(dict(batch), "val")
    packing["token_positions"] = packing["token_positions"].flip(0)  # a wrong order shows
    assert not torch.equal(task.step({**batch, **packing}, "val"), unpadded)
    packing["token_positions"] = packing["token_positions"].flip(0)
    assert torch.equal(task.step({**batch, **packing}, "val"), unpadded)


@pytest.mark.parametrize("towers,multilabel", [(1, False), (2, False), (1, True)])
def test_classification_tasks(towers, multilabel):
    dm = FakeClassificationDataModule(batch_size=4, seq_len=16, vocab_size=20, num_classes=4,
                                      num_towers=towers, multi_label=multilabel)
    model = LRAClassifier(num_classes=4, vocab_size=20, max_seq_len=16, n_layer=1, n_head=2,
                          d_model=16, d_ff=32, num_towers=towers, multi_label=multilabel,
                          attention="standard")
    task = ClassificationTask(model, optimizer={"name": "adamw", "lr": 1e-3},
                              scheduler={"name": "rsqrt", "warmup_steps": 2})
    t = _fit(task, dm, steps=3, accumulate_grad_batches=2)
    m = t.callback_metrics
    assert "val/acc" in m
    if multilabel:
        assert task.multi_label and "val/micro_f1" in m


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_gradient_clipping_works_with_fused_adamw(precision):
    torch.manual_seed(0)
    dm = FakeLMDataModule(batch_size=4, seq_len=8, vocab_size=16, n_train=32)
    model = GPT(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=16, dropout=0.0,
                attention="sdpa")
    task = LanguageModelingTask(model, optimizer={"name": "adamw", "lr": 1e-2, "fused": True})
    norms = []
    original = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        params = list(params)
        total = original(params, max_norm, *args, **kwargs)
        norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))))
        return total

    torch.nn.utils.clip_grad_norm_ = spy
    try:
        _fit(task, dm, steps=3, precision=precision, gradient_clip_val=0.01)
    finally:
        torch.nn.utils.clip_grad_norm_ = original
    assert len(norms) == 3 and max(norms) <= 0.01 + 1e-5  # clipped norms, every step


def test_performer_features_redraw_at_optimizer_steps_not_layer_calls(monkeypatch):
    """Two layers share one Performer module and batches accumulate in pairs: with
    redraw_interval 2, five optimizer steps draw at the first call and redraw at steps 2 and 4."""
    from fa_train.attention.performer import PerformerAttention
    draws = []
    plain = PerformerAttention.redraw
    monkeypatch.setattr(PerformerAttention, "redraw",
                        lambda self, *a: (draws.append(task.trainer.global_step), plain(self, *a)))
    torch.manual_seed(0)
    dm = FakeClassificationDataModule(batch_size=4, seq_len=16, vocab_size=20, num_classes=4)
    model = LRAClassifier(num_classes=4, vocab_size=20, max_seq_len=16, n_layer=2, n_head=2,
                          d_model=16, d_ff=32, attn_dropout=0.0,
                          attention={"impl": "performer", "nb_features": 8, "redraw_interval": 2})
    task = ClassificationTask(model, optimizer={"name": "adamw", "lr": 1e-3})
    _fit(task, dm, steps=5, accumulate_grad_batches=2)
    assert draws == [0, 2, 4]
