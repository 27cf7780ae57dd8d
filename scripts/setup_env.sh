#!/usr/bin/env bash
# Create the project's virtual environment: PyTorch (CPU build without a CUDA GPU), then the project.
# Usage: scripts/setup_env.sh [VENV_DIR]     (TORCH_SPEC overrides the torch requirement)
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
"$python" -m venv "$venv"
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    torch_spec=${TORCH_SPEC:-torch}              # CUDA GPU: the default (CUDA) wheel
else
    torch_spec=${TORCH_SPEC:-torch==2.13.0}      # no GPU: the pinned CPU build
fi
echo "setup: installing $torch_spec"
$pip install -q "$torch_spec"
$pip install -q -e ".[dev]"
echo "setup: environment ready in $venv"
