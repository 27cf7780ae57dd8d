"""PauseAfter: one process stops at the first step past its limit or moment; several decide
together."""
import time
from types import SimpleNamespace

import pytest

from fa_train.callbacks.pause import SYNC_EVERY, PauseAfter


def fake_trainer(world_size, votes):
    def reduce(decision, all=True):
        votes.append(decision)
        return any([decision, *peers])
    peers = [True]  # another rank is past its limit
    return SimpleNamespace(world_size=world_size, global_step=0, should_stop=False,
                           strategy=SimpleNamespace(reduce_boolean_decision=reduce))


def test_one_process_stops_at_the_first_step_past_the_limit():
    pause, votes = PauseAfter(1e-9), []
    trainer = fake_trainer(1, votes)
    pause.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.should_stop and pause.paused and votes == []


def test_ranks_decide_together_every_sync_every_steps():
    pause, votes = PauseAfter(60.0), []  # this rank is within its limit; a peer is not
    trainer = fake_trainer(2, votes)
    for step in range(1, SYNC_EVERY):
        trainer.global_step = step
        pause.on_train_batch_end(trainer, None, None, None, 0)
    assert votes == [] and not trainer.should_stop
    trainer.global_step = SYNC_EVERY
    pause.on_train_batch_end(trainer, None, None, None, 0)
    assert votes == [False] and trainer.should_stop and pause.paused


@pytest.mark.parametrize("at, stops", [(time.time() - 1, True), (time.time() + 3600, False)])
def test_a_moment_stops_at_the_first_step_after_it(at, stops):
    pause, votes = PauseAfter(at=at), []
    trainer = fake_trainer(1, votes)
    pause.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.should_stop == stops and pause.paused == stops


def test_a_pause_needs_minutes_or_a_moment():
    with pytest.raises(ValueError, match="minutes or at"):
        PauseAfter()
