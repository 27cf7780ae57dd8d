"""Shared test setup: Triton runs in interpreter mode without a GPU; `gpu` tests need CUDA.
A long suite can run in parts: --budget-s skips the tests not started in time (so the JUnit XML is
still written), and --skip-passed leaves out the tests an earlier part's XML records as passed."""
import os
import time
import xml.etree.ElementTree as ET

import pytest

try:
    import torch
    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a hard dependency
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


BUDGET_SPENT = "budget spent"   # the skip reason of the tests --budget-s left for a later part
_STARTED = pytest.StashKey[float]()


def pytest_addoption(parser):
    group = parser.getgroup("suite in parts")
    group.addoption("--budget-s", type=float, default=None, metavar="SECONDS",
                    help=f"skip ('{BUDGET_SPENT}') the tests not started within SECONDS")
    group.addoption("--skip-passed", action="append", default=[], metavar="XML",
                    help="leave out the tests that passed in this JUnit XML (repeatable)")


def junit_outcomes(path) -> dict[tuple[str, str], str]:
    """(classname, name) -> passed, failure, error, skipped or BUDGET_SPENT for each test case of
    a JUnit XML."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = [c for c in case if c.tag in ("failure", "error", "skipped")]
        outcomes[(case.get("classname"), case.get("name"))] = (
            "passed" if not kinds else
            BUDGET_SPENT if kinds[0].get("message") == BUDGET_SPENT else kinds[0].tag)
    return outcomes


def passed_in(path: str) -> set[tuple[str, str]]:
    """(classname, name) of the test cases a JUnit XML records as passed."""
    try:
        outcomes = junit_outcomes(path)
    except (OSError, ET.ParseError) as e:
        raise pytest.UsageError(f"--skip-passed: cannot read {path}: {e}") from None
    return {case for case, outcome in outcomes.items() if outcome == "passed"}


def pytest_sessionstart(session):
    session.config.stash[_STARTED] = time.monotonic()


def pytest_runtest_setup(item):
    budget = item.config.getoption("budget_s")
    if budget is not None and time.monotonic() - item.config.stash[_STARTED] > budget:
        pytest.skip(BUDGET_SPENT)


def pytest_collection_modifyitems(config, items):
    budget = config.getoption("budget_s")
    if budget is not None and budget <= 0:
        raise pytest.UsageError(f"--budget-s must be > 0, got {budget}")
    done = set().union(*(passed_in(p) for p in config.getoption("skip_passed")))
    if done:
        from _pytest.junitxml import mangle_test_address
        keep, left_out = [], []
        for item in items:
            names = mangle_test_address(item.nodeid)
            (left_out if (".".join(names[:-1]), names[-1]) in done else keep).append(item)
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep
    if _HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
