"""Data-parallel helpers used by the trainer configs."""
import pytest
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from fa_train.utils.distributed import gradient_comm_hook


def test_gradient_comm_hook_by_dtype():
    assert gradient_comm_hook("fp32") is None
    assert gradient_comm_hook("bf16") is default_hooks.bf16_compress_hook
    assert gradient_comm_hook("fp16") is default_hooks.fp16_compress_hook


def test_unknown_gradient_dtype_names_the_setting():
    with pytest.raises(ValueError, match="ddp_comm_hook.dtype"):
        gradient_comm_hook("int8")
