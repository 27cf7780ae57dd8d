#!/usr/bin/env bash
# On a CUDA host: run the gpu-marked tests and a quick attention benchmark, and write the results
# (test log, JUnit XML, benchmark JSON/Markdown/PNGs, a summary JSON with the tests' counts) into
# OUT_DIR. A suite longer than one job runs in parts: BUDGET_S=SECONDS skips the tests not started
# in time ("budget spent"), SKIP_PASSED="A.xml B.xml" leaves out those earlier parts passed.
# Usage: scripts/gpu_check.sh OUT_DIR [TEST_PATH ...]   (default: the whole suite)
#   PYTHON selects the interpreter (default python3); BENCH=0 skips the benchmark.
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [TEST_PATH ...]}
shift
python=${PYTHON:-python3}
mkdir -p "$out"
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible')" || exit 1
parts=()
[[ -n ${BUDGET_S:-} ]] && parts+=(--budget-s "$BUDGET_S")
for xml in ${SKIP_PASSED:-}; do parts+=(--skip-passed "$xml"); done
"$python" -m pytest -m gpu -q -rfE -p no:cacheprovider --junitxml "$out/gpu_tests.xml" "${parts[@]}" "$@" \
    2>&1 | tee "$out/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}
bench_rc=0
if [[ ${BENCH:-1} != 0 ]]; then
    "$python" -m fa_train.bench.cli attention --out "$out/bench" --quick --no-progress \
        --impls flash,sdpa_flash,sdpa_cudnn,standard 2>&1 | tee "$out/bench.log"
    bench_rc=${PIPESTATUS[0]}
fi
"$python" - "$out" "$tests_rc" "$bench_rc" "$(cd "$(dirname "$0")/.." && pwd)" <<'PY'
import collections, datetime, json, pathlib, sys
import torch
out, tests_rc, bench_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])   # the checkout: its tests/conftest.py reads the XML
from fa_train.utils.provenance import git_commit   # FA_TRAIN_GIT_COMMIT names a copied tree's code
from tests.conftest import junit_outcomes
xml = out / "gpu_tests.xml"   # absent when pytest stopped before its end
counts = collections.Counter(junit_outcomes(xml).values()) if xml.is_file() else {}
summary = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "commit": git_commit(), "gpu_tests_rc": tests_rc,
           "tests": dict(sorted(counts.items())), "bench_rc": bench_rc}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
PY
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
