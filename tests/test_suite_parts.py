"""The test suite in parts (tests/conftest.py): --budget-s skips the tests not started in time,
--skip-passed leaves out the tests an earlier part's JUnit XML records as passed."""
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SUITE = '''
import time
import pytest
@pytest.mark.parametrize("i", range(3))
def test_slow(i):
    time.sleep(0.8)
def test_fails():
    assert False
class TestGroup:
    def test_quick(self):
        pass
'''


def _write_suite(root: Path) -> None:
    """The suite above under root/tests, with the project's tests/conftest.py."""
    (root / "tests").mkdir()
    shutil.copy(Path(__file__).parent / "conftest.py", root / "tests" / "conftest.py")
    (root / "tests" / "test_suite.py").write_text(SUITE)


def _part(root: Path, name: str, *args: str) -> dict[str, str]:
    """Run the suite with `args`; return {test name: outcome} from its JUnit XML."""
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
                    "--junitxml", f"{name}.xml", *args], cwd=root, capture_output=True, text=True)
    outcomes = {}
    for case in ET.parse(root / f"{name}.xml").getroot().iter("testcase"):
        kinds = [c.get("message") or c.tag for c in case]
        outcomes[case.get("name")] = kinds[0] if kinds else "passed"
    return outcomes


def test_a_suite_runs_in_parts(tmp_path):
    _write_suite(tmp_path)
    first = _part(tmp_path, "one", "--budget-s", "1.0")
    assert first["test_slow[0]"] == "passed"
    assert first["test_quick"] == "budget spent"
    second = _part(tmp_path, "two", "--skip-passed", "one.xml")
    assert "test_slow[0]" not in second
    assert second["test_quick"] == "passed" and second["test_slow[2]"] == "passed"
    assert second["test_fails"] != "passed"
    third = _part(tmp_path, "three", "--skip-passed", "one.xml", "--skip-passed", "two.xml")
    assert list(third) == ["test_fails"]


def test_bad_part_options_name_the_option(tmp_path):
    _write_suite(tmp_path)
    for args, text in ((["--budget-s", "0"], "--budget-s must be > 0, got 0.0"),
                       (["--skip-passed", "missing.xml"], "--skip-passed: cannot read missing.xml")):
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "tests", *args], cwd=tmp_path, capture_output=True, text=True)
        assert run.returncode != 0 and text in run.stdout + run.stderr
