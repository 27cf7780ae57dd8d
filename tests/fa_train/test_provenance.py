"""Result files name the code they came from."""
import subprocess

import pytest

from fa_train.utils import provenance


@pytest.mark.parametrize("status, expected", [("", "abc1234"), (" M kernels/x.py", "abc1234-dirty")])
def test_the_commit_and_whether_the_tree_differs(monkeypatch, status, expected):
    def fake_git(cmd, **kwargs):
        out = "abc1234" if "rev-parse" in cmd else status
        return subprocess.CompletedProcess(cmd, 0, stdout=out + "\n")
    monkeypatch.setattr(provenance.subprocess, "run", fake_git)
    monkeypatch.delenv("FA_TRAIN_GIT_COMMIT", raising=False)
    assert provenance.git_commit() == expected
    monkeypatch.setenv("FA_TRAIN_GIT_COMMIT", "def5678")
    assert provenance.git_commit() == "def5678"
