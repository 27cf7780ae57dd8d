#!/usr/bin/env bash
# The kernel benchmarks behind the README's tables, on one CUDA GPU (about 15 minutes on an H100).
# Usage: scripts/gpu_bench.sh OUT_DIR     (PYTHON selects the interpreter, default python3)
# Writes OUT_DIR/{attention,attention_d128,attention_d128_cuda_graph,attention_long,blocksparse,
# blocksize,io}/ with JSON, Markdown and PNGs.
set -uo pipefail
out=${1:?usage: scripts/gpu_bench.sh OUT_DIR}
python=${PYTHON:-python3}
bench() { timeout "$1" "$python" -m fa_train.bench.cli "${@:2}" --no-progress; echo "[$2 exit $?]"; }
mkdir -p "$out"
# Anchors' shapes: batch x seqlen = 16K tokens, hidden 2048 (32 heads of 64 or 16 of 128)
bench 300 attention --out "$out/attention" --seqlens 1024,4096,16384 --head-dims 64,128 --causal 0,1 \
    --impls flash,sdpa_flash,sdpa_cudnn,flex,sdpa_efficient,standard --passes fwd,bwd,fwd+bwd
# d = 128 against its peers: median of 5 repeats, the impls alternating; the backward alone too
bench 420 attention --out "$out/attention_d128" --seqlens 1024,4096,16384 --head-dims 128 \
    --causal 0,1 --impls flash,sdpa_flash,sdpa_cudnn,flex --passes fwd,bwd,fwd+bwd --repeats 5
# ... and at N = 1K, where an eager call's host time rivals its GPU time, replayed from CUDA graphs
bench 120 attention --out "$out/attention_d128_cuda_graph" --seqlens 1024 --head-dims 128 \
    --causal 0,1 --impls flash,sdpa_flash,sdpa_cudnn,flex --passes fwd,fwd+bwd --repeats 5 \
    --timer cuda-graph
# Long causal sequences: batch 1, 16 heads of 64
bench 60 attention --out "$out/attention_long" --seqlens 32768,65536 --head-dims 64 --causal 1 \
    --tokens 32768 --hidden 1024 --impls flash,sdpa_flash,sdpa_cudnn --passes fwd+bwd --no-check
bench 420 blocksparse --out "$out/blocksparse" --seqlens 4096,16384,65536 --head-dims 64,128 --tokens 65536 \
    --factors 2,4,max --impls blocksparse,flash,flex --passes fwd,fwd+bwd
bench 40 blocksize --out "$out/blocksize"
bench 60 io --out "$out/io"
