"""Benchmark-harness tests time tiny CPU problems: one thread avoids oversubscribed cores."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
