"""fa-train: reproduce the FlashAttention paper's experiments on our own Triton kernels."""
import importlib.util
from pathlib import Path

__version__ = "0.1.0"

KERNELS_MARKER = "__fa_train_kernels__"  # assigned in kernels/__init__.py


def check_kernels_package() -> None:
    """Stop with one message when ``import kernels`` would load another distribution's package
    (Hugging Face's ``kernels`` takes the same import name) instead of the Triton kernels beside
    fa_train. Checked without importing it: its __init__.py must assign the marker."""
    spec = importlib.util.find_spec("kernels")
    if spec is None:
        return  # not installed at all: the first `import kernels` names the problem itself
    origin = Path(spec.origin) if spec.origin else None
    if origin and origin.is_file() and f"{KERNELS_MARKER} = True" in origin.read_text(errors="replace"):
        return
    where = origin or ", ".join(spec.submodule_search_locations or [])
    raise ImportError(
        f"fa-train: `import kernels` resolves to {where}, which is not fa-train's Triton kernels "
        "(another distribution, such as Hugging Face's `kernels`, uses the same import name). "
        "Fix: `pip uninstall kernels` in this environment, or install fa-train in its own "
        "virtual environment.")


check_kernels_package()
