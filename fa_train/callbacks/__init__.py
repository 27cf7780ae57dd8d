"""Training callbacks: throughput (tokens/s per GPU), MFU, peak memory, loss history, training clock."""
from fa_train.callbacks.clock import TrainingClock
from fa_train.callbacks.perf import PerfMonitor
from fa_train.callbacks.history import LossHistory
from fa_train.callbacks.progress import ProgressBar

__all__ = ["LossHistory", "PerfMonitor", "ProgressBar", "TrainingClock"]
