"""Exact FlashAttention (paper Alg. 2 and 4) on our Triton kernels: the user-facing functions.

Tensors use the flash-attn layout (batch, seqlen, heads, head_dim); packed variable-length batches
use (total_tokens, heads, head_dim) with cumulative sequence offsets. The layers beneath:
kernels/attention_inputs.py (argument checks), kernels/attention_op.py (the torch op and its
autograd), kernels/attention_launch.py (the launchers) and kernels/attention_kernels.py (the
Triton kernels).
"""
import torch

from kernels import tuning
from kernels.attention_inputs import (check_cu_seqlens, check_dropout, check_key_padding_mask,
                                      check_qkv, check_qkvpacked, check_window, resolve_scale)
from kernels.attention_kernels import dropout_mask_kernel
from kernels.attention_launch import AttentionProblem, cdiv, forward
from kernels.attention_op import attention_call, draw_seed
from kernels.torch_ops import interpreting


def next_dropout_seed(device=None):
    """Seed that the next dropout call on `device` will draw (the generator is left unchanged).

    device: default "cuda", or "cpu" under the interpreter."""
    device = torch.device(device or ("cpu" if interpreting() else "cuda"))
    if device.type == "cuda":
        generator = torch.cuda.default_generators[device.index if device.index is not None
                                                  else torch.cuda.current_device()]
    else:
        generator = torch.default_generator
    state = generator.get_state()
    seed = int(draw_seed(device).item())
    generator.set_state(state)
    return seed


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    key_padding_mask=None, return_lse=False, deterministic=False,
                    window_size=(-1, -1)):
    """Exact attention, q (B, Nq, Hq, d), k and v (B, Nk, Hkv, d) with Hq % Hkv == 0.

    causal aligns the mask bottom-right (query i sees keys j <= i + Nk - Nq); key_padding_mask is a
    (B, Nk) bool tensor, True = keep. window_size (left, right): sliding-window (local) attention,
    query i sees keys i + Nk - Nq - left <= j <= i + Nk - Nq + right, -1 = unbounded on that side
    (causal makes right 0); only the key tiles inside the window are computed. Returns out
    (B, Nq, Hq, d) and, with return_lse, the log-sum-exp (B, Hq, Nq) in float32. With dropout the
    backward adds dQ with float32 atomics, whose order varies; deterministic=True keeps a separate
    dQ pass (bitwise reproducible).
    """
    q, k, v = check_qkv(q, k, v, 4)
    kpm = check_key_padding_mask(key_padding_mask, q, k)
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, kpm,
                              deterministic=deterministic,
                              window=check_window(window_size, causal))
    return (out, lse) if return_lse else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              key_padding_mask=None, return_lse=False, deterministic=False,
                              window_size=(-1, -1)):
    """flash_attn_func over q, k, v packed in one tensor qkv (B, N, 3, H, d), as a fused q/k/v
    projection makes them: the forward reads the three in place and the backward writes one packed
    gradient, so no pass copies them (not even in compiled graphs). Returns out (B, N, H, d) and,
    with return_lse, lse (B, H, N)."""
    qkv = check_qkvpacked(qkv, 5)
    kpm = check_key_padding_mask(key_padding_mask, qkv, qkv)
    out, lse = attention_call(qkv, None, None, dropout_p, softmax_scale, causal, kpm,
                              deterministic=deterministic,
                              window=check_window(window_size, causal))
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, return_lse=False,
                           deterministic=False, window_size=(-1, -1)):
    """Attention over packed variable-length sequences: q (total_q, Hq, d), k/v (total_k, Hkv, d).

    Sequence b spans rows cu_seqlens[b]:cu_seqlens[b+1] (int32). lse is (Hq, total_q). causal and
    window_size align each sequence's mask bottom-right, as in flash_attn_func.
    """
    q, k, v = check_qkv(q, k, v, 3)
    check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device, int(max_seqlen_q))
    check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device, int(max_seqlen_k))
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError("cu_seqlens_q and cu_seqlens_k must describe the same number of sequences")
    out, lse = attention_call(q, k, v, dropout_p, softmax_scale, causal, None,
                              cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                              deterministic=deterministic,
                              window=check_window(window_size, causal))
    return (out, lse) if return_lse else out


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, return_lse=False,
                                     deterministic=False, window_size=(-1, -1)):
    """flash_attn_varlen_func over packed variable-length sequences whose q, k, v are packed in
    one tensor qkv (total, 3, H, d): no copies of q, k, v, one packed gradient."""
    qkv = check_qkvpacked(qkv, 4)
    check_cu_seqlens("cu_seqlens", cu_seqlens, qkv.shape[0], qkv.device, int(max_seqlen))
    out, lse = attention_call(qkv, None, None, dropout_p, softmax_scale, causal, None,
                              cu_seqlens, cu_seqlens, int(max_seqlen), int(max_seqlen),
                              deterministic=deterministic,
                              window=check_window(window_size, causal))
    return (out, lse) if return_lse else out


def flash_attn_forward(q, k, v, softmax_scale=None, causal=False, block_m=None, block_n=None):
    """Forward pass only, optionally with explicit tile sizes (block-size sweeps); (out, lse)."""
    q, k, v = check_qkv(q, k, v, 4)
    prob = AttentionProblem(q, k, sm_scale=resolve_scale(softmax_scale, q.shape[-1]),
                            causal=bool(causal))
    config = dict(tuning.forward_config(prob.block_d, prob.causal, seqlen_q=prob.seqlen_q))
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is None:
            continue
        if value < 16 or value > 256 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two in [16, 256], got {value}")
        config["BLOCK_M" if name == "block_m" else "BLOCK_N"] = value
    with torch.no_grad():
        return forward(q, k, v, prob, config)


def dropout_mask(batch, heads, seqlen_q, seqlen_k, dropout_p, seed, device="cuda"):
    """The keep-mask (B, H, Nq, Nk) bool that a call with this seed applies (for tests/debugging)."""
    check_dropout(dropout_p)
    mask = torch.empty(batch * heads, seqlen_q, seqlen_k, dtype=torch.int8, device=device)
    grid = (cdiv(seqlen_q, 32), cdiv(seqlen_k, 32), batch * heads)
    seed = torch.tensor([int(seed)], dtype=torch.int64, device=device)
    dropout_mask_kernel[grid](mask, seqlen_q, seqlen_k, float(dropout_p), seed,
                               BLOCK_M=32, BLOCK_N=32)
    return mask.view(batch, heads, seqlen_q, seqlen_k).bool()
