"""Shared helpers for kernel tests: random inputs, float64 references, relative errors."""
import torch

from kernels import attention_launch
from kernels import dropout_mask, reference_attention, tuning


def rel_err(x, ref):
    """‖x − ref‖ / ‖ref‖ in float64 (0 when both are zero)."""
    ref = ref.detach().double()
    num = (x.detach().double() - ref).norm()
    den = ref.norm()
    return float(num / den) if den > 0 else float(num)


def qkv(batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim, dtype=torch.float32, device="cpu"):
    """Fresh random q, k, v that require grad."""
    shapes = ((batch, seqlen_q, heads, head_dim), (batch, seqlen_k, heads_kv, head_dim),
              (batch, seqlen_k, heads_kv, head_dim))
    return [torch.randn(s, dtype=dtype, device=device).requires_grad_() for s in shapes]


def run_with_grads(fn, tensors, grad_out=None):
    """Run fn(*tensors), backprop grad_out (random when None); return out, grads, grad_out."""
    out = fn(*tensors)
    if grad_out is None:
        grad_out = torch.randn_like(out)
    out.backward(grad_out)
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out, grads, grad_out


def reference_with_grads(tensors, grad_out, **kwargs):
    """float64 reference output and gradients for the same inputs."""
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    out, _ = reference_attention(*leaves, **kwargs)
    out.backward(grad_out.double())
    return out, [t.grad for t in leaves]


def assert_close_to_reference(out, grads, ref_out, ref_grads, tol):
    assert torch.isfinite(out).all(), "output has NaN/inf"
    assert rel_err(out, ref_out) < tol, f"out rel err {rel_err(out, ref_out):.2e}"
    for name, g, rg in zip("qkv", grads, ref_grads):
        assert torch.isfinite(g).all(), f"d{name} has NaN/inf"
        assert rel_err(g, rg) < tol, f"d{name} rel err {rel_err(g, rg):.2e}"


def assert_varlen_matches_reference(out, grads, grad_out, tensors, cu, tol, dropout_p=0.0,
                                    seed=None, **kwargs):
    """A packed variable-length call's output and gradients against the float64 reference of
    each sequence alone; with dropout, the mask that `seed` gives sequence b is that of heads
    b*H .. b*H+H-1 of one Philox stream."""
    heads = tensors[0].shape[1]
    for b in range(cu.numel() - 1):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        n = rows.stop - rows.start
        keep = None
        if dropout_p:
            keep = dropout_mask(b + 1, heads, n, n, dropout_p, seed, cu.device)[b:b + 1]
        part = [t.detach()[rows][None] for t in tensors]
        ref, ref_grads = reference_with_grads(part, grad_out[rows][None], dropout_mask=keep,
                                              dropout_p=dropout_p, **kwargs)
        assert rel_err(out[rows], ref[0]) < tol
        for grad, ref_grad in zip(grads, ref_grads):
            assert rel_err(grad[rows], ref_grad[0]) < tol


def backward_path(monkeypatch, deterministic):
    """Make deterministic=False take the atomic-dQ backward whatever the dropout and head dim (by
    default only calls with dropout at d <= 64 do), so that a test covers both backward paths;
    returns the flag to pass."""
    if not deterministic:
        monkeypatch.setattr(tuning, "atomic_dq", lambda dropout_p, block_d: True)
    return deterministic


def record_launches(monkeypatch):
    """Record every attention kernel launch as (kernel name, launch config); returns the list."""
    launched, launch = [], attention_launch.launch_kernel

    def recording(kernel, grid, args, config, **flags):
        launched.append((kernel.fn.__name__, config))
        return launch(kernel, grid, args, config, **flags)
    monkeypatch.setattr(attention_launch, "launch_kernel", recording)
    return launched


def loads_in_every_mode(call, tensors, monkeypatch, fallback=None):
    """Run `call` (forward and backward) with interpreter tiles in each of `tuning.TMA_MODES`; each
    of the three launches must take the mode (or `fallback[mode]`, where the call cannot) and give
    bit for bit what pointer loads give."""
    grad_out = torch.randn_like(tensors[0])
    results = {}
    for tma in tuning.TMA_MODES:
        tiles = dict(tuning._interpreter_config(), TMA=tma)
        with monkeypatch.context() as m:
            m.setattr(tuning, "_interpreter_config", lambda: dict(tiles))
            launches = record_launches(m)
            torch.manual_seed(0)  # the same dropout seed
            out, grads, _ = run_with_grads(call, tensors, grad_out)
        launched = [config.get("TMA") for _, config in launches]
        assert launched == [(fallback or {}).get(tma, tma)] * 3  # forward, dQ pass, dK/dV pass
        results[tma] = [out, *grads]
    for tma in tuning.TMA_MODES[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[tuning.POINTER_LOADS], results[tma]))
