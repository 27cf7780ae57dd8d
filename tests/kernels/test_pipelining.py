"""Block-sparse kernel loops keep as many tile loads in flight as the dense ones (kernels/NOTES.md,
round 13), checked on the Triton IR compiled for an H100 (sm_90); needs no GPU."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_blocksparse_loops_prefetch_like_dense_ones(head_dim):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    probe = ROOT / "research" / "kernel_probes" / "kernel_pipelining.py"
    done = subprocess.run([sys.executable, str(probe),
                           "--head-dim", str(head_dim), "--same-tiles", "--json"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    waits = json.loads(done.stdout)
    for kernel in ("forward", "dK/dV", "dQ"):
        dense, sparse = waits[f"dense {kernel}"], waits[f"block-sparse {kernel}"]
        assert dense and sparse, (kernel, dense, sparse)
        assert None not in sparse, (kernel, sparse)
        assert min(sparse) >= min(dense) > 0, (kernel, dense, sparse)
