"""LayerNorm that runs narrow rows through Triton (kernels.layer_norm) on CUDA.

The same module, parameters and state_dict as ``nn.LayerNorm`` over the last dimension; ``impl``
picks the kernels: ``torch``, ``fused`` (kernels.layer_norm; CUDA, or the interpreter) or ``auto``:
fused on CUDA for rows of at most AUTO_WIDTH features, where PyTorch's kernel gives each row a
thread block that mostly idles (measured in kernels/NOTES.md, "LayerNorm over narrow rows").
"""
import torch
import torch.nn as nn

from fa_train.errors import check_choice

IMPLS = ("auto", "fused", "torch")
AUTO_WIDTH = 64


class LayerNorm(nn.LayerNorm):
    def __init__(self, width: int, eps: float = 1e-5, bias: bool = True, impl: str = "auto"):
        check_choice("model.norm_impl", impl, IMPLS)
        super().__init__(width, eps=eps, bias=bias)
        self.impl = impl

    def fused(self, x: torch.Tensor) -> bool:
        """Whether this call goes through the Triton kernels."""
        if self.impl == "auto":
            return x.is_cuda and self.normalized_shape[0] <= AUTO_WIDTH
        return self.impl == "fused"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fused(x):
            return super().forward(x)
        from kernels.layer_norm import layer_norm  # Triton: only on this path
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, impl={self.impl}"
