#!/bin/bash
# Run ws_probe.py over its grid from the repository root, each case with a 45 s timeout
# (rc=124: the kernel hung). Usage: ws_drive.sh OUT_DIR
out=$1
for shape in 4,4096,32,64 1,16384,16,128; do
  for impl in ours cudnn mini_ws4_64_2 mini_ws4_128_2 mini_ws4_64_3 mini_ws4_128_3 mini_plain8_64_3 mini_plain8_128_3; do
    timeout 45 python research/warp_specialization/ws_probe.py $out $shape $impl > /tmp/l 2>&1; rc=$?
    grep -v -i warn /tmp/l | tail -2; echo "$shape $impl rc=$rc"
  done
done
