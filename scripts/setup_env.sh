#!/usr/bin/env bash
# Create the project's virtual environment on the tested stack, then install the project (editable).
#   CUDA GPU: torch 2.11.0 (CUDA 13.0 build) + triton 3.6.0, the stack every GPU result was measured on.
#   no GPU:   torch 2.13.0+cpu (the CPU-only build, no CUDA wheels) + triton 3.6.0 for the
#             interpreter that runs the kernel tests.
# torch comes from PyTorch's wheel index for that build when it is reachable, else from pip's own
# configuration (PyPI, find-links); TORCH_WHEELS=DIR adds a local wheel directory.
# Usage: scripts/setup_env.sh [VENV_DIR]     (TORCH_SPEC / TRITON_SPEC / TORCH_INDEX override)
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
sources=()
if [ -n "${TORCH_WHEELS:-}" ]; then
    sources+=(--find-links "$TORCH_WHEELS")
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    torch_spec=${TORCH_SPEC:-torch==2.11.0}
    index=${TORCH_INDEX:-https://download.pytorch.org/whl/cu130}
else
    torch_spec=${TORCH_SPEC:-torch==2.13.0+cpu}
    index=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
fi
if "$venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=10)" \
        "$index" 2>/dev/null; then
    sources+=(--extra-index-url "$index")
else
    echo "setup: $index unreachable; looking for $torch_spec in pip's configured sources"
fi
triton_spec=${TRITON_SPEC:-triton==3.6.0}
echo "setup: installing $torch_spec $triton_spec"
"${pip[@]}" install -q "${sources[@]}" "$torch_spec" "$triton_spec"
"${pip[@]}" install -q -e ".[dev,wandb,tensorboard]"
"$venv/bin/fa-train" --version
echo "setup: environment ready in $venv"
