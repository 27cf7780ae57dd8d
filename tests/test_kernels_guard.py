"""fa_train refuses to run when `import kernels` would load another distribution's package."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _import_fa_train(tmp_path, *front):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, front), str(REPO)])}
    return subprocess.run([sys.executable, "-c", "import fa_train, kernels; print(kernels.__file__)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_ours_passes_the_guard(tmp_path):
    proc = _import_fa_train(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == REPO / "kernels" / "__init__.py"


def test_a_shadowing_kernels_package_stops_import_with_one_message(tmp_path):
    fake = tmp_path / "site" / "kernels"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('"""Another project\'s kernels."""\n__version__ = "0.4.4"\n')
    proc = _import_fa_train(tmp_path, tmp_path / "site")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: fa-train: `import kernels` resolves to ")
    assert str(fake / "__init__.py") in last and "pip uninstall kernels" in last

