"""Where Triton is not installed (macOS, Windows), every model still builds and runs with the
PyTorch implementations: nothing on that path imports Triton."""
import subprocess
import sys

SCRIPT = """
import sys
class NoTriton:
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("no triton here")
sys.meta_path.insert(0, NoTriton())
import torch
from fa_train.models import LRAClassifier
m = LRAClassifier(num_classes=2, vocab_size=16, max_seq_len=32, n_layer=1, n_head=2, d_model=16,
                  d_ff=16, attention={"impl": "sdpa"})
print(tuple(m(torch.randint(1, 16, (2, 32))).shape))
from kernels.layouts import LayoutSpec
print(tuple(LayoutSpec(block_size=16).build(64).shape))
"""


def test_pytorch_attention_and_layouts_need_no_triton():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(2,", "2)", "(4,", "4)"]
