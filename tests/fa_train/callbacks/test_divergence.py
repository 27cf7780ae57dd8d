"""StopOnDivergence: non-finite weights stop a run at the next check; a non-finite loss only at two
checks in a row (fp16 loss scaling skips single overflowing steps); ranks decide together."""
from types import SimpleNamespace

import pytest
import torch

from fa_train.callbacks.divergence import StopOnDivergence


def fake_trainer(world_size=1, votes=None, peer_diverged=False):
    """A trainer as the stopping callbacks see it; `peer_diverged`: another rank votes to stop."""
    def reduce(decision, all=True):
        votes.append(decision)
        return decision or peer_diverged
    return SimpleNamespace(world_size=world_size, global_step=0, should_stop=False,
                           strategy=SimpleNamespace(reduce_boolean_decision=reduce))


def step(stop, trainer, module, n, loss=1.0):
    trainer.global_step = n
    stop.on_train_batch_end(trainer, module, {"loss": torch.tensor(loss)}, None, 0)


def test_non_finite_weights_stop_at_the_next_check():
    stop, trainer, module = StopOnDivergence(every=5), fake_trainer(), torch.nn.Linear(3, 2)
    step(stop, trainer, module, 5)
    assert not trainer.should_stop and stop.diverged_at is None
    with torch.no_grad():
        module.weight[0, 1] = float("inf")
    for n in range(6, 10):   # between checks nothing is looked at
        step(stop, trainer, module, n)
    assert not trainer.should_stop
    step(stop, trainer, module, 10)
    assert trainer.should_stop and stop.diverged_at == 10 and "parameters" in stop.reason


def test_a_non_finite_loss_stops_only_at_two_checks_in_a_row():
    stop, trainer, module = StopOnDivergence(every=5), fake_trainer(), torch.nn.Linear(3, 2)
    step(stop, trainer, module, 5, loss=float("nan"))
    step(stop, trainer, module, 10, loss=2.0)          # one overflowing step, then finite again
    step(stop, trainer, module, 15, loss=float("inf"))
    assert not trainer.should_stop
    step(stop, trainer, module, 20, loss=float("nan"))
    assert trainer.should_stop and stop.diverged_at == 20 and "loss" in stop.reason


def test_ranks_decide_together_at_each_check():
    votes = []
    stop = StopOnDivergence(every=5)
    trainer = fake_trainer(world_size=2, votes=votes, peer_diverged=True)
    step(stop, trainer, torch.nn.Linear(3, 2), 3)
    assert votes == [] and not trainer.should_stop
    step(stop, trainer, torch.nn.Linear(3, 2), 5)
    assert votes == [False] and trainer.should_stop and stop.diverged_at == 5
    assert stop.reason == "seen by another process"


def test_the_interval_must_be_a_positive_number_of_steps():
    with pytest.raises(ValueError, match="every must be at least 1 step"):
        StopOnDivergence(every=0)
