"""StopOnStall: a classifier whose head is dead (no gradient below it) stops at the second check in
a row; a live one, or a model without a head, never does; ranks decide together."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from fa_train.callbacks.stall import StopOnStall, body_parameters
from fa_train.models import LRAClassifier
from tests.fa_train.callbacks.test_divergence import fake_trainer


def classifier(dead: bool) -> LRAClassifier:
    torch.manual_seed(0)
    model = LRAClassifier(num_classes=2, vocab_size=16, max_seq_len=8, n_layer=1, n_head=2,
                          d_model=8, d_ff=8, attention="standard")
    if dead:   # every hidden unit of the head below zero, whatever the input
        with torch.no_grad():
            model.head[0].bias.fill_(-1e3)
    return model


def step(stop, trainer, model, n):
    """Optimizer step `n`: a fresh batch's gradients, then the callback's look before the step."""
    model.zero_grad()
    ids = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(n))
    F.cross_entropy(model(ids), torch.tensor([0, 0, 0, 1])).backward()
    trainer.global_step = n
    stop.on_before_optimizer_step(trainer, SimpleNamespace(model=model), None)


def test_a_dead_head_stops_the_run_at_the_second_check_in_a_row():
    stop, trainer, model = StopOnStall(every=5), fake_trainer(), classifier(dead=True)
    for n in range(5):   # the check at step 0 saw no gradient below the head: one so far
        step(stop, trainer, model, n)
    assert not trainer.should_stop and stop.stalled_at is None
    assert model.head[2].bias.grad.abs().sum() > 0   # only the output bias still learns
    step(stop, trainer, model, 5)
    assert trainer.should_stop and stop.stalled_at == 5 and "classifier head" in stop.reason


def test_a_live_classifier_never_stalls_and_a_model_without_head_is_not_checked():
    stop, trainer, model = StopOnStall(every=1), fake_trainer(), classifier(dead=False)
    for n in range(4):
        step(stop, trainer, model, n)
    assert not trainer.should_stop and stop.stalled_at is None
    assert body_parameters(torch.nn.Linear(3, 2)) == []
    stop, lm = StopOnStall(every=1), torch.nn.Linear(3, 2)
    for n in range(3):   # zero gradients, but no head: nothing to say
        lm.weight.grad = torch.zeros_like(lm.weight)
        trainer.global_step = n
        stop.on_before_optimizer_step(trainer, SimpleNamespace(model=lm), None)
    assert not trainer.should_stop and stop._checked_step is None


def test_ranks_decide_together_at_each_check():
    votes = []
    stop = StopOnStall(every=5)
    trainer = fake_trainer(world_size=2, votes=votes, peer_diverged=True)
    step(stop, trainer, classifier(dead=False), 3)
    assert votes == [] and not trainer.should_stop
    step(stop, trainer, classifier(dead=False), 5)
    assert votes == [False] and trainer.should_stop and stop.stalled_at == 5
    assert stop.reason == "seen by another process"


def test_the_interval_must_be_a_positive_number_of_steps():
    with pytest.raises(ValueError, match="every must be at least 1 step"):
        StopOnStall(every=0)
