"""Wrapping Triton launchers as torch ops, shared by the attention and cross-entropy kernels."""
import os

import torch
from torch.library import wrap_triton


SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreting():
    """True when Triton runs kernels on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def traceable(kernel, tensor):
    """`kernel`, wrapped for tracing when `tensor` is a tracing subclass (a compiled graph then
    records the launch and makes it itself); eager calls launch directly."""
    return kernel if type(tensor) is torch.Tensor else wrap_triton(kernel)


def kernel_op(name):
    """Decorator making a torch op of a function that launches Triton kernels, so that
    torch.compile keeps the call in its graph. On GPUs a `triton_op`: compiled graphs launch the
    kernels themselves (no Python per call, CUDA-graph safe). Under the interpreter a plain custom
    op (Inductor cannot trace interpreted kernels), which then needs `register_fake`."""
    if interpreting():
        return torch.library.custom_op(name, mutates_args=())
    return torch.library.triton_op(name, mutates_args=())


def check_kernel_input(name, x):
    """A clear error, naming the argument, for a dtype the kernels lack or a tensor they cannot
    reach (CPU tensors need the interpreter)."""
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported: float16, bfloat16, float32")
    if x.device.type != "cuda" and not interpreting():
        raise RuntimeError(f"{name} is on {x.device}: the Triton kernels need CUDA tensors "
                           "(or TRITON_INTERPRET=1 to run them slowly on the CPU)")
