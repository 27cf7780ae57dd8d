#!/usr/bin/env bash
# Download the wheels an air-gapped CUDA host needs on top of a PyTorch image, for one Python
# version on manylinux x86_64. The host then installs them without a network:
#   pip install --no-index --no-deps --target SITE DIR/*.whl
#   pip install --no-index --no-deps --no-build-isolation --target SITE DIR/antlr4-python3-runtime-*.tar.gz
#   export PYTHONPATH=SITE:$PWD
# Usage: scripts/wheelhouse.sh DIR [PYTHON_VERSION] [--minimal]
#   --minimal: only what training needs (Hydra, OmegaConf, datasets); default adds wandb and its deps.
set -euo pipefail
dir=${1:?usage: scripts/wheelhouse.sh DIR [PYTHON_VERSION] [--minimal]}
py=${2:-3.12}
minimal=${3:-}
python=${PYTHON:-python3}
core=(hydra-core==1.3.2 omegaconf==2.3.0 datasets==5.2.0 dill multiprocess)
logging=(wandb gitpython gitdb smmap sentry-sdk setproctitle pydantic pydantic-core
         annotated-types typing-inspection platformdirs)
pkgs=("${core[@]}")
[ "$minimal" = "--minimal" ] || pkgs+=("${logging[@]}")
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
mkdir -p "$dir"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
    --implementation cp "${platforms[@]}" -d "$dir" "${pkgs[@]}"
# antlr4-python3-runtime 4.9.3 (required by omegaconf 2.3) is published only as an sdist
"$python" -m pip download -q --no-deps --no-binary=:all: -d "$dir" antlr4-python3-runtime==4.9.3
ls -1 "$dir"
