"""How many tile loads each attention kernel loop keeps in flight, compiled for a GPU on any machine.

Triton's software pipeliner overlaps a loop's matmuls with the loads of later iterations only when
it can issue those loads early; a load whose address waits on another load of the same iteration
(an index read from memory) is left synchronous. This script compiles the forward, dK/dV and dQ
kernels (dense and block-sparse, the tiles of kernels/tuning.py) for a target architecture without
a GPU and, for every loop that multiplies tiles, reads the number of copies still in flight when
the loop waits for its operands (Triton IR `async_wait {num = N}`; for loops that load through TMA
descriptors, the copies issued ahead of the loop per iteration's copies; 0: no overlap).

Usage: python research/kernel_probes/kernel_pipelining.py [--arch 90] [--head-dim 64] [--same-tiles] [--json]
--same-tiles compiles the dense kernels with the block-sparse tiles too, so that the two rows of a
kernel differ only in how the loop finds its blocks. Needs TRITON_INTERPRET unset (the interpreter
replaces the compiler).
"""
import argparse
import json
import os
import re

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import tuning
from kernels.attention_kernels import bwd_dkdv_kernel, bwd_dq_kernel, fwd_kernel
from kernels.attention_launch import block_d_for

# dtypes of the pointer arguments by name; other upper-case arguments are int32 index arrays
POINTERS = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "O": "*bf16", "DO": "*bf16", "DK": "*bf16",
            "DV": "*bf16", "DQ": "*bf16", "LSE": "*fp32", "STATS": "*fp32", "KPM": "*u8",
            "SEED": "*i64"}
FLOATS = {"qk_scale", "sm_scale", "dropout_p"}
LAYOUT_BLOCK = 128


def _signature(kernel, constants, descriptors):
    """Argument types as the launcher would specialize them: 16-byte aligned pointers and
    integers divisible by 16, except the GQA group size; `descriptors` gives the types of
    tensor-descriptor arguments."""
    signature, aligned = {}, []
    for i, name in enumerate(kernel.arg_names):
        if name in constants:
            signature[name] = "constexpr"
            continue
        if name in descriptors:
            signature[name] = descriptors[name]
            continue
        if name in FLOATS:
            signature[name] = "fp32"
        elif name in POINTERS or name.isupper():
            signature[name] = POINTERS.get(name, "*i32")
        elif name.islower():
            signature[name] = "i32"
        else:
            raise ValueError(f"no type rule for argument {name!r} of {kernel.fn.__name__}")
        if name != "group_size" and signature[name] != "fp32":
            aligned.append(i)
    return signature, {(i,): [["tt.divisibility", 16]] for i in aligned}


def _descriptors(kernel, config, constants):
    """Types of the launcher's descriptor arguments (DESC1, DESC2): None unless the config loads
    through host descriptors, whose tiles are one head's rows x BLOCK_D."""
    if config.get("TMA") != tuning.HOST_DESCRIPTORS:
        return {}, {"DESC1": None, "DESC2": None}
    rows = config["BLOCK_M"] if kernel is bwd_dkdv_kernel else config["BLOCK_N"]
    desc = f"tensordesc<bf16[1,{rows},1,{constants['BLOCK_D']}]>"
    return {"DESC1": desc, "DESC2": desc}, {}


def compile_kernel(kernel, config, constants, arch):
    """`kernel` compiled for `arch` with launch `config` and constexpr `constants` (its `asm`
    holds every stage: ttgir, ptx, cubin)."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter replaces Triton's compiler")
    descriptors, unused = _descriptors(kernel, config, constants)
    constants = dict(constants, **unused, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                     TMA=config.get("TMA", tuning.POINTER_LOADS))
    constants = {k: v for k, v in constants.items() if k in kernel.arg_names}
    signature, attrs = _signature(kernel, constants, descriptors)
    index = {name: i for i, name in enumerate(kernel.arg_names)}
    source = ASTSource(fn=kernel, signature=signature, attrs=attrs,
                       constexprs={(index[k],): v for k, v in constants.items()})
    options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


TMA_COPY = "async_tma_copy_global_to_local"


def _tma_tiles_ahead(lines, indent, i, body):
    """For a loop at line i that loads through TMA: the copies its prologue issued (lines of the
    loop's own level since the previous loop there) over those one iteration issues, i.e. the
    tiles in flight when it first waits (None without TMA copies in the body)."""
    per_iteration = sum(TMA_COPY in b for b in body)
    if not per_iteration:
        return None
    issued = 0
    for j in range(i - 1, -1, -1):
        if indent[j] < indent[i] or (indent[j] == indent[i] and "scf.for" in lines[j]):
            break
        issued += indent[j] == indent[i] and TMA_COPY in lines[j]
    return issued // per_iteration


def loop_waits(ttgir):
    """For each `scf.for` whose body (not counting inner loops) holds a tile matmul: the
    in-flight count of its first `async_wait`, or for a loop that loads through TMA the tiles its
    prologue issued ahead (None when it never waits on a copy)."""
    lines = ttgir.splitlines()
    indent = [len(line) - len(line.lstrip()) for line in lines]
    waits = []
    for i, line in enumerate(lines):
        if "scf.for" not in line:
            continue
        body = []
        for j in range(i + 1, len(lines)):
            if indent[j] <= indent[i]:
                break
            if indent[j] == indent[i] + 2:
                body.append(lines[j])
        if not any("warp_group_dot " in b or "tt.dot " in b for b in body):
            continue
        nums = [int(m.group(1)) for b in body if "async_wait" in b
                for m in [re.search(r"\{num = (\d+)", b)] if m]
        waits.append(nums[0] if nums else _tma_tiles_ahead(lines, indent, i, body))
    return waits


def kernel_cases(head_dim, same_tiles=False, causal=False, dropout=False, window=False):
    """(name, kernel, launch config, constants) of each kernel, dense and block-sparse (with
    same_tiles, both with the block-sparse tiles); window: the dense kernels compiled for a
    sliding window (which carries the causal bound itself)."""
    block_d = block_d_for(head_dim)
    base = dict(HEAD_DIM=head_dim, BLOCK_D=block_d, IS_CAUSAL=causal and not window,
                HAS_KPM=False, VARLEN=False, DROPOUT=dropout, ATOMIC_DQ=False, PACKED=False)
    for sparse in (False, True):
        constants = dict(base, SPARSE=sparse, LAYOUT_BLOCK=LAYOUT_BLOCK if sparse else 1,
                         REVERSE=causal and not sparse, WINDOW=window and not sparse)
        tiles = sparse or same_tiles
        dkdv, dq = tuning.backward_configs(block_d, sparse=tiles)
        forward = tuning.forward_config(block_d, causal, sparse=tiles)
        kind = "block-sparse" if sparse else "dense"
        for name, kernel, config in (("forward", fwd_kernel, forward),
                                     ("dK/dV", bwd_dkdv_kernel, dkdv),
                                     ("dQ", bwd_dq_kernel, dq)):
            if tiles:  # tiles fit in the layout blocks
                config = dict(config, BLOCK_M=min(config["BLOCK_M"], LAYOUT_BLOCK),
                              BLOCK_N=min(config["BLOCK_N"], LAYOUT_BLOCK))
            yield f"{kind} {name}", kernel, config, constants


def report(arch=90, head_dim=64, same_tiles=False):
    """{kernel: [in-flight copies at each matmul loop's wait]}."""
    return {name: loop_waits(compile_kernel(kernel, config, constants, arch).asm["ttgir"])
            for name, kernel, config, constants in kernel_cases(head_dim, same_tiles)}


def target_parser(description):
    """Arguments shared by the offline compilation scripts: --arch, --head-dim, --json."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for H100")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ap


def main():
    ap = target_parser(__doc__.splitlines()[0])
    ap.add_argument("--same-tiles", action="store_true",
                    help="dense kernels with the block-sparse tiles as well")
    args = ap.parse_args()
    result = report(args.arch, args.head_dim, args.same_tiles)
    if args.json:
        print(json.dumps(result))
        return
    print(f"sm_{args.arch}, head dim {args.head_dim}: copies in flight at each matmul loop's wait")
    for name, waits in result.items():
        print(f"  {name:<22} {waits}")


if __name__ == "__main__":
    main()
