"""Generated datasets are filled once, even when several runs ask for the same one at once."""
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from fa_train.data.lra.datamodule import _atomic_dir
from fa_train.errors import PreparationPaused


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
    assert not list(tmp_path.glob("set.partial"))


def test_a_paused_fill_is_continued_and_a_failed_one_removed(tmp_path):
    final = tmp_path / "set"

    def pause(work: Path) -> None:
        (work / "part1").write_text("1")
        raise PreparationPaused("deadline")

    def finish(work: Path) -> None:
        assert (work / "part1").read_text() == "1"   # what the paused call left
        (work / "part2").write_text("2")

    with pytest.raises(PreparationPaused):
        _atomic_dir(final, pause)
    assert not final.exists() and (tmp_path / "set.partial" / "part1").is_file()
    _atomic_dir(final, finish)
    assert sorted(p.name for p in final.iterdir()) == ["part1", "part2"]
    assert not (tmp_path / "set.partial").exists()

    def fail(work: Path) -> None:
        (work / "junk").write_text("x")
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        _atomic_dir(tmp_path / "other", fail)
    assert not (tmp_path / "other.partial").exists() and not (tmp_path / "other").exists()
