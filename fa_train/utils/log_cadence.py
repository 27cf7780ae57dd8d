"""Whether the values a training step logs will be written.

Lightning writes on-step metrics every ``trainer.log_every_n_steps`` optimizer steps and drops the
values logged at the steps between, yet each ``self.log`` call still costs host time (about half a
millisecond). Steps shorter than a few tens of milliseconds lose that time outright, since the GPU
then waits on the host; so per-step logging asks `logs_this_step` first, as Lightning's own
LearningRateMonitor does.
"""
from __future__ import annotations


def logs_this_step(trainer) -> bool:
    """True when Lightning writes this training batch's logged values (valid from
    ``on_train_batch_start`` to ``on_train_batch_end``); True outside a trainer."""
    if trainer is None:
        return True
    return bool(trainer._logger_connector.should_update_logs)
