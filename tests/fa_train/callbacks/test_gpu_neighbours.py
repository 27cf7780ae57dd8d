"""GpuNeighbours: the step from which another job shared the run's GPU, from the driver's list."""
import os
import time
from types import SimpleNamespace

import pytest

from fa_train.callbacks.gpu_neighbours import GpuNeighbours, ancestors, parse_compute_apps

ME = os.getpid()
PARENTS = {ME: 50, 50: 1, 70: ME, 90: 1}   # 50 launched this process, 70 is its child, 90 is not kin


def watch(*polls):
    """A watch whose driver lists `polls` in turn (None: the driver cannot be asked)."""
    lists = iter(polls)
    return GpuNeighbours(list_apps=lambda: next(lists), parent_of=PARENTS.get)


def test_the_driver_list_is_parsed_with_its_uuids():
    text = "12345, GPU-aaaa\n 678, GPU-bbbb\nNo running processes found\n"
    assert parse_compute_apps(text) == [(12345, "GPU-aaaa"), (678, "GPU-bbbb")]


def test_ancestors_end_at_the_first_process():
    assert ancestors(70, PARENTS.get) == {70, ME, 50, 1}


def test_another_job_marks_the_step_of_the_last_poll_that_saw_the_gpu_alone():
    w = watch([(ME, "A")], [(ME, "A"), (90, "B")], [(ME, "A"), (90, "A")], [(ME, "A")])
    for step in (0, 100, 200, 300):
        w.poll(step)
    assert w.shared_from_step == 100      # 90 arrived on GPU A between steps 100 and 200
    assert w.summary == {} and w.listed   # off CUDA (no training started): nothing to record


def test_own_children_ancestors_and_other_gpus_are_not_neighbours():
    w = watch([(ME, "A"), (70, "A"), (50, "A"), (90, "B")], None)
    w.poll(5)
    w.poll(6)
    assert w.shared_from_step is None


def test_a_process_the_driver_never_lists_sees_nothing():
    w = watch([(90, "A")])
    w.poll(3)
    w.watching = True
    assert w.summary == {"gpu_shared_from_step": None, "gpu_watch": "not listed"}


def test_the_mark_survives_a_pause():
    w = watch([(ME, "A")], [(ME, "A"), (90, "A")])
    w.poll(42)
    w.poll(60)
    again = watch([(ME, "A")])
    again.load_state_dict(w.state_dict())
    again.poll(50)
    assert again.shared_from_step == 42


def test_the_thread_polls_while_training_on_cuda_and_stops_at_the_end():
    seen = []
    w = GpuNeighbours(every_s=0.01, list_apps=lambda: seen.append(1) or [(ME, "A")])
    trainer = SimpleNamespace(global_step=9)
    w.on_train_start(trainer, SimpleNamespace(device=SimpleNamespace(type="cuda")))
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(seen) >= 3
    w.on_train_end(trainer, None)
    stopped = len(seen)
    assert w._thread is None and w.summary == {"gpu_shared_from_step": None, "gpu_watch": "listed"}
    w.teardown(trainer, None, "fit")
    assert len(seen) == stopped


def test_off_cuda_the_watch_stays_idle():
    w = GpuNeighbours(list_apps=lambda: [(90, "A")])
    w.on_train_start(SimpleNamespace(global_step=0), SimpleNamespace(device=SimpleNamespace(type="cpu")))
    w.teardown(None, None, "fit")
    assert w.summary == {} and w._thread is None


@pytest.mark.gpu
def test_on_a_gpu_another_process_holding_it_is_seen():
    import subprocess
    import sys

    import torch
    torch.ones(1, device="cuda")   # this process now holds a context on its GPU
    w = GpuNeighbours(parent_of=lambda pid: None)   # the holder below counts as another job
    w.poll(1)
    assert w.listed and w.shared_from_step is None
    holder = subprocess.Popen([sys.executable, "-c", "import sys, torch; torch.ones(1, device='cuda');"
                               " print('ready', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        w.poll(2)
    finally:
        holder.communicate("")
    assert w.shared_from_step == 1
