#!/usr/bin/env bash
# A/B of two code trees on one GPU: did a change that should not move speed move it?
# Times dense attention forward+backward (flash and cuDNN SDPA, d = 64 and 128, N = 512-8K) and a
# compiled GPT-2 small training step with our kernels, alternating the trees (A B A B) so that drift
# of the card hits both alike; then prints the medians per tree side by side.
# Usage: research/code_ab/run.sh TREE_A TREE_B OUT   (each tree holds kernels/, fa_train/, configs/)
set -uo pipefail
a=${1:?usage: run.sh TREE_A TREE_B OUT}; b=${2:?}; out=${3:?}
python=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd); a=$(cd "$a" && pwd); b=$(cd "$b" && pwd)
for round in 1 2; do
    for side in A B; do
        tree=$a; [ "$side" = B ] && tree=$b
        tag=${side}_$round
        # `python -m` puts its working folder first on sys.path: each tree runs from its own folder
        (cd "$tree" && "$python" -m fa_train.bench.cli attention --quick \
            --no-progress --impls flash,sdpa_cudnn --out "$out/attn_$tag" > "$out/attn_$tag.log" 2>&1)
        (cd "$tree" && "$python" -m fa_train.bench.cli train-step --no-progress \
            --models gpt2-small --impls flash --compile 1 --runners bare --steps 20 \
            --out "$out/step_$tag" > "$out/step_$tag.log" 2>&1)
        echo "$tag done"
    done
done
"$python" "$(dirname "$0")/summarize.py" "$out" "$a" "$b"
