"""Training callbacks: throughput (tokens/s per GPU), MFU, peak memory, loss history and plot,
the training clock, other jobs on the run's GPU, pausing after a stretch of wall time, stopping a
diverged or stalled run, the run's checkpoint, the weights at the best validation and its
metrics.json record."""
from fa_train.callbacks.best_weights import BestWeights
from fa_train.callbacks.checkpoint import LastCheckpoint
from fa_train.callbacks.clock import TrainingClock
from fa_train.callbacks.divergence import StopOnDivergence
from fa_train.callbacks.gpu_neighbours import GpuNeighbours
from fa_train.callbacks.history import LossHistory
from fa_train.callbacks.pause import PauseAfter
from fa_train.callbacks.perf import PerfMonitor
from fa_train.callbacks.progress import ProgressBar
from fa_train.callbacks.run_record import RunRecord
from fa_train.callbacks.stall import StopOnStall

__all__ = ["BestWeights", "GpuNeighbours", "LastCheckpoint", "LossHistory", "PauseAfter",
           "PerfMonitor", "ProgressBar", "RunRecord", "StopOnDivergence", "StopOnStall",
           "TrainingClock"]
