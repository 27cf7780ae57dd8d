"""Generated datasets are filled once, even when several runs ask for the same one at once."""
import multiprocessing as mp
import time
from pathlib import Path

from fa_train.data.lra.datamodule import _atomic_dir


def _fill(tmp: Path) -> None:
    time.sleep(0.3)                       # long enough for the other processes to arrive
    (tmp / "data.txt").write_text("x")
    with open(tmp.parent / "fills.log", "a") as log:
        log.write("fill\n")


def _claim(final: str) -> None:
    _atomic_dir(Path(final), _fill)


def test_concurrent_requests_fill_once(tmp_path):
    final = tmp_path / "set"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_claim, args=(str(final),)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert (final / "data.txt").read_text() == "x"
    assert (tmp_path / "fills.log").read_text() == "fill\n"
    assert not list(tmp_path.glob("set.tmp*"))
