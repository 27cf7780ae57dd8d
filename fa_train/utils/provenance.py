"""Which code a result came from, for result files."""
import os
import subprocess
from pathlib import Path


def git_commit():
    """Short commit of the checkout, with "-dirty" when tracked files differ from it; or
    FA_TRAIN_GIT_COMMIT where set, for trees whose git metadata is missing or not their code's
    (exported or copied trees); None outside a git checkout."""
    if os.environ.get("FA_TRAIN_GIT_COMMIT"):
        return os.environ["FA_TRAIN_GIT_COMMIT"]
    here = Path(__file__).resolve().parent

    def git(*args):
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    try:
        commit = git("rev-parse", "--short", "HEAD")
        if commit and git("status", "--porcelain", "--untracked-files=no"):
            commit += "-dirty"
        return commit or None
    except (OSError, subprocess.SubprocessError):
        return None
