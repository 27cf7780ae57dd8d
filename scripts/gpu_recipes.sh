#!/usr/bin/env bash
# Run recipes at the gpu scale, one after another, within a time budget; then render their reports
# and pack into OUT/reports.tar.gz each recipe's top-level files (results.json, report, plots) and the
# folders of the runs named (all runs when none are named): checkpoints excluded, except kept ones
# (paused runs and their best-validation weights, transfer sources) of at most CKPT_MB (default
# 16), so that they can continue on another host. A pack over PACK_MB (default 16) is reported.
# Runs resume: a run that finished is skipped next time; training runs pause before the budget
# ends (fa-repro's --time-budget) and continue next time, before the others and the nearest to
# its end first; a run cut off anyway runs again. The paused runs' table of each report (step
# reached, training minutes left) is printed last.
# WORK=DIR runs each recipe in DIR/<recipe>/<scale> instead of reports/<recipe>/<scale>, first
# copied from there: a host that keeps DIR between calls (a folder the tree's copy leaves alone)
# continues even runs whose checkpoints are too large to travel. The pack names reports/ either way.
# Usage: scripts/gpu_recipes.sh OUT SECONDS RECIPE[:RUN,RUN,...] ...
#   FORCE=1 reruns finished runs; SCALE=smoke|gpu|full picks another scale (default gpu);
#   IN_PROCESS=1 runs them in one Python process (no start-up per run; for sweeps of short runs);
#   JOBS=N runs N at once (accuracy studies); GPUS=0,1 one run per GPU at once;
#   PAUSE_AFTER=MINUTES pauses each training run.
set -uo pipefail
out=${1:?usage: scripts/gpu_recipes.sh OUT SECONDS RECIPE[:RUN,...] ...}
budget=${2:?usage: scripts/gpu_recipes.sh OUT SECONDS RECIPE[:RUN,...] ...}
shift 2
scale=${SCALE:-gpu}
python=${PYTHON:-python3}
end=$(( $(date +%s) + budget ))
mkdir -p "$out"
root=${WORK:-reports}
packed=()   # what the pack holds: each recipe's top-level files, and its named runs' folders
for spec in "$@"; do
    recipe=${spec%%:*}
    dir=$root/$recipe/$scale
    if [[ ! -d $dir ]] && [[ -d reports/$recipe/$scale ]]; then
        mkdir -p "$dir" && cp -a "reports/$recipe/$scale/." "$dir/"
    fi
    only=()
    if [[ $spec == *:* ]]; then
        IFS=, read -ra runs <<< "${spec#*:}"
        for run in "${runs[@]}"; do only+=(--only "$run"); packed+=("$dir/$run"); done
    else
        packed+=("$dir")
    fi
    left=$(( end - $(date +%s) ))
    if (( left < 30 )); then echo "budget spent: $recipe not started"; continue; fi
    timeout -k 10 "$left" "$python" -m fa_train.repro.cli run "$recipe" --scale "$scale" --out "$dir" --no-report \
        --time-budget "$(awk "BEGIN {print ($left - 15) / 60}")" \
        "${only[@]}" ${FORCE:+--force} ${IN_PROCESS:+--in-process} ${JOBS:+--jobs "$JOBS"} ${GPUS:+--gpus "$GPUS"} \
        ${PAUSE_AFTER:+--pause-after "$PAUSE_AFTER"} > "$out/$recipe.log" 2>&1
    echo "$recipe: exit $?"; grep -E '^\[[0-9]+/[0-9]+\]|: (ok|OOM|failed|error)' "$out/$recipe.log" | tail -n 30
    pkill -f "fa_train.train .*$dir/" || true   # its own runs' stragglers only
done
for spec in "$@"; do
    dir=$root/${spec%%:*}/$scale
    "$python" -m fa_train.repro.cli report "${spec%%:*}" --scale "$scale" --out "$dir" > /dev/null 2>&1 \
        || echo "report failed: $spec"
    sed -n '/^## Runs in progress/,/^## Runs$/{/^| /p}' "$dir/report.md" 2>/dev/null   # what is left
    [[ $spec == *:* ]] && packed+=($(find "$dir" -maxdepth 1 -type f))
done
packed=($(for path in "${packed[@]}"; do [[ -e $path ]] && echo "$path"; done | sort -u))
as_reports=(--transform "s|^${root#/}/|reports/|")   # tar names paths without their leading /
tar cf "$out/reports.tar" "${as_reports[@]}" --exclude='*.ckpt' --exclude=checkpoints "${packed[@]}"
find "${packed[@]}" -path '*/checkpoints/*' \( -name last.ckpt -o -name best_weights.pt \) -size -"$(( ${CKPT_MB:-16} * 1024 + 1 ))"k \
    -exec tar rf "$out/reports.tar" "${as_reports[@]}" {} + 2>/dev/null
gzip -f "$out/reports.tar"
size_mb=$(( $(stat -c %s "$out/reports.tar.gz") / 1048576 ))
if (( size_mb >= ${PACK_MB:-16} )); then
    echo "reports.tar.gz is $size_mb MiB, over PACK_MB=${PACK_MB:-16}: name fewer runs or lower CKPT_MB"
fi
