#!/usr/bin/env bash
# On a CUDA host: run the gpu-marked tests and a quick attention benchmark, and write the results
# (test log, JUnit XML, benchmark JSON/Markdown/PNGs, a summary JSON) into OUT_DIR.
# Usage: scripts/gpu_check.sh OUT_DIR        (PYTHON selects the interpreter, default python3)
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR}
python=${PYTHON:-python3}
mkdir -p "$out"
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible')" || exit 1
"$python" -m pytest -m gpu -q -p no:cacheprovider --junitxml "$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}
"$python" -m fa_train.bench.cli attention --out "$out/bench" --quick --no-progress \
    --impls flash,sdpa_flash,sdpa_cudnn,standard 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}
"$python" - "$out" "$tests_rc" "$bench_rc" <<'PY'
import json, pathlib, sys, datetime, torch
out, tests_rc, bench_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
summary = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "gpu_tests_rc": tests_rc, "bench_rc": bench_rc}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
PY
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
