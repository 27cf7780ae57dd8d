"""BestWeights: saves the weights at each improvement of its metric, nothing without the metric,
and carries its best through a checkpoint."""
from types import SimpleNamespace

import pytest
import torch

from fa_train.callbacks.best_weights import BestWeights
from fa_train.errors import UserError


def validate(cb, trainer, module, step, **metrics):
    trainer.global_step = step
    trainer.callback_metrics = {k: torch.tensor(v) for k, v in metrics.items()}
    with torch.no_grad():
        module.weight.fill_(step)
    cb.on_validation_end(trainer, module)


def saved(cb):
    blob = torch.load(cb.path)
    return blob["step"], blob["value"], float(blob["state_dict"]["weight"][0, 0])


@pytest.fixture
def run():
    trainer = SimpleNamespace(sanity_checking=False, is_global_zero=True, global_step=0,
                              callback_metrics={})
    return trainer, torch.nn.Linear(2, 1, bias=False)


def test_saves_on_improvement_only(tmp_path, run):
    cb = BestWeights(str(tmp_path))
    validate(cb, *run, 2, **{"val/acc": 0.5})
    validate(cb, *run, 4, **{"val/acc": 0.4})
    assert saved(cb) == (2, 0.5, 2.0)
    validate(cb, *run, 6, **{"val/acc": 0.75})
    assert saved(cb) == (6, 0.75, 6.0)
    assert cb.summary == {"best_val/acc": 0.75, "best_val/step": 6}


def test_min_mode_keeps_the_lowest(tmp_path, run):
    cb = BestWeights(str(tmp_path), monitor="val/loss", mode="min")
    for step, loss in [(1, 2.0), (2, 1.0), (3, 1.5)]:
        validate(cb, *run, step, **{"val/loss": loss})
    assert saved(cb) == (2, 1.0, 2.0) and cb.summary == {"best_val/loss": 1.0, "best_val/step": 2}


def test_missing_metric_and_sanity_check_save_nothing(tmp_path, run):
    trainer, module = run
    cb = BestWeights(str(tmp_path))
    validate(cb, trainer, module, 1, **{"val/loss": 1.0})
    trainer.sanity_checking = True
    validate(cb, trainer, module, 0, **{"val/acc": 1.0})
    assert not cb.path.exists() and cb.best_step is None and cb.summary == {}


def test_only_global_rank_zero_writes(tmp_path, run):
    trainer, module = run
    trainer.is_global_zero = False
    cb = BestWeights(str(tmp_path))
    validate(cb, trainer, module, 3, **{"val/acc": 0.5})
    assert not cb.path.exists() and cb.summary == {"best_val/acc": 0.5, "best_val/step": 3}


def test_state_dict_round_trip(tmp_path, run):
    cb = BestWeights(str(tmp_path))
    validate(cb, *run, 4, **{"val/acc": 0.5})
    resumed = BestWeights(str(tmp_path))
    resumed.load_state_dict(cb.state_dict())
    assert (resumed.best_value, resumed.best_step) == (0.5, 4)
    validate(resumed, *run, 6, **{"val/acc": 0.25})  # not better than the best before the pause
    assert saved(resumed) == (4, 0.5, 4.0)


def test_bad_mode_is_one_line():
    with pytest.raises(UserError, match=r"^mode='best' is invalid: expected one of max, min$"):
        BestWeights("x", mode="best")
