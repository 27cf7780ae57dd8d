"""The README's results section is rendered from the committed result files."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_results_match_the_result_files():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_results.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_readme_quick_start_names_the_ci_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make run" in readme and "make test" in readme and "make test" in ci
