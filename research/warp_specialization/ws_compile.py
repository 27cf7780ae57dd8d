"""Compile ws_probe.py's kernel for sm_90 without a GPU and report what Triton 3.6's Hopper warp
specialization made of it: threads per program, `setmaxnreg` instructions (one per warpgroup
partition and direction) and `ttg.warp_specialize` regions, or the pass's failure.

Usage (repository root, TRITON_INTERPRET unset): python research/warp_specialization/ws_compile.py
"""
import os
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(__file__))
from ws_probe import fwd  # noqa: E402


def compile_probe(warps, block_m, block_n, d, early_exit, stages=3):
    desc = lambda rows: f"tensordesc<bf16[1,{rows},{d}]>"
    signature = {"DQ": desc(block_m), "DK": desc(block_n), "DV": desc(block_n), "O": "*bf16",
                 "N": "i32", "qk_scale": "fp32"}
    constants = dict(BLOCK_M=block_m, BLOCK_N=block_n, D=d, WS=True, EARLY_EXIT=early_exit)
    signature.update({name: "constexpr" for name in constants})
    index = {name: i for i, name in enumerate(fwd.arg_names)}
    source = ASTSource(fn=fwd, signature=signature,
                       constexprs={(index[k],): v for k, v in constants.items()},
                       attrs={(index["O"],): [["tt.divisibility", 16]],
                              (index["N"],): [["tt.divisibility", 16]]})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": stages})


def _quiet(fn, *args):
    """fn(*args) with file descriptor 2 closed off: a failing pass dumps its IR there."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        return fn(*args)
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def main():
    print(f"triton {triton.__version__}, sm_90, warp_specialize=True")
    print("warps  tile      d    early exit  result")
    for warps, block_m, block_n, d in [(4, 128, 64, 64), (4, 128, 128, 128), (8, 128, 64, 64),
                                       (8, 128, 128, 128)]:
        for early_exit in (False, True):
            try:
                k = _quiet(compile_probe, warps, block_m, block_n, d, early_exit)
                result = (f"{k.metadata.num_warps * 32} threads, "
                          f"{k.asm['ptx'].count('setmaxnreg')} setmaxnreg, "
                          f"{k.asm['ttgir'].count('ttg.warp_specialize')} warp_specialize regions")
            except Exception as err:  # the pass asserts or fails on some kernels
                result = f"compile failed: {str(err).splitlines()[0][:80]}"
            print(f"{warps:<6} {block_m}x{block_n:<5} {d:<4} {str(early_exit):<11} {result}")


if __name__ == "__main__":
    main()
