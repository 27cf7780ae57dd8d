"""Machine instructions per iteration of each attention kernel loop, compiled on any machine.

Compiles the dense forward, dK/dV and dQ kernels with the tiles of kernels/tuning.py for a target
architecture (ptxas and cuobjdump ship with Triton), disassembles them and, for every innermost
loop that multiplies tiles (HGMMA on Hopper), counts its instructions by opcode: what one
iteration issues besides the matmuls. Also reports registers and stack (spill) bytes per thread.
kernels/NOTES.md round 22 used these counts to find the per-row work the dK/dV loop repeated,
round 23 the dropout uniforms exchanged between threads (--dropout: the kernels with dropout, dQ
by a pass of its own); --window compiles them for a sliding window (round 30).

Usage: python research/kernel_probes/loop_instructions.py [--arch 90] [--head-dim 64] [--causal] [--dropout]
       [--window]
       [--json]
Needs TRITON_INTERPRET unset (the interpreter replaces the compiler).
"""
import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import triton

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kernel_pipelining import compile_kernel, kernel_cases, target_parser  # noqa: E402

TOOLS = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
_MMA = ("HGMMA", "HMMA")


def parse_sass(text):
    """[(address, instruction)] of a cuobjdump -sass listing."""
    return [(int(m.group(1), 16), m.group(2)) for m in map(_LINE.search, text.splitlines()) if m]


def _opcode(instruction):
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]


def matmul_loops(instructions):
    """For each innermost loop (a backward branch with no other backward branch inside) holding a
    tile matmul: {"instructions": n, "opcodes": {opcode: count}}, in program order."""
    index = {address: i for i, (address, _) in enumerate(instructions)}
    loops = []
    for i, (address, text) in enumerate(instructions):
        m = _BRANCH.search(text)
        if not m or int(m.group(1), 16) >= address or int(m.group(1), 16) not in index:
            continue
        start = index[int(m.group(1), 16)]
        body = instructions[start:i + 1]
        inner = any((b := _BRANCH.search(t)) and int(b.group(1), 16) < a and a != address
                    for a, t in body)
        if inner or not any(_opcode(t).startswith(_MMA) for _, t in body):
            continue
        opcodes = collections.Counter(_opcode(t) for _, t in body)
        loops.append({"instructions": len(body), "opcodes": dict(opcodes.most_common())})
    return loops


def _tool(name, *args):
    return subprocess.run([str(TOOLS / name), *args], capture_output=True, text=True,
                          check=True).stdout


def resources(cubin_path):
    """(registers, stack bytes) per thread from cuobjdump's resource usage."""
    m = re.search(r"REG:(\d+) STACK:(\d+)", _tool("cuobjdump", "--dump-resource-usage", cubin_path))
    return int(m.group(1)), int(m.group(2))


def report(arch=90, head_dim=64, causal=False, dropout=False, window=False):
    """{kernel: {"registers", "stack_bytes", "loops"}} for the dense kernels."""
    result = {}
    for case, kernel, config, constants in kernel_cases(head_dim, causal=causal, dropout=dropout,
                                                        window=window):
        if not case.startswith("dense "):
            continue
        name = case.removeprefix("dense ")
        compiled = compile_kernel(kernel, config, constants, arch)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "kernel.cubin")
            pathlib.Path(path).write_bytes(compiled.asm["cubin"])
            registers, stack = resources(path)
            loops = matmul_loops(parse_sass(_tool("cuobjdump", "-sass", path)))
        result[name] = {"registers": registers, "stack_bytes": stack, "loops": loops}
    return result


def main():
    ap = target_parser(__doc__.splitlines()[0])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dropout", action="store_true")
    ap.add_argument("--window", action="store_true", help="kernels for a sliding window")
    args = ap.parse_args()
    result = report(args.arch, args.head_dim, args.causal, args.dropout, args.window)
    if args.json:
        print(json.dumps(result))
        return
    flags = (", causal" if args.causal else "") + (", dropout" if args.dropout else "")
    flags += ", sliding window" if args.window else ""
    print(f"sm_{args.arch}, head dim {args.head_dim}{flags}: "
          "instructions per iteration of each matmul loop")
    for name, r in result.items():
        print(f"{name}: {r['registers']} registers, {r['stack_bytes']} bytes of stack")
        for loop in r["loops"]:
            top = ", ".join(f"{op} {n}" for op, n in list(loop["opcodes"].items())[:8])
            print(f"  {loop['instructions']:4d}: {top}")


if __name__ == "__main__":
    main()
