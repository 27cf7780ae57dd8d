"""Attention dispatch: the single place where an implementation name becomes a callable.

Every model calls attention through :func:`build_attention`, so switching
``attention=standard|sdpa|flash|blocksparse|auto`` changes nothing else: with the same weights
and dropout off, all implementations give the same outputs within floating-point tolerance.

One signature for every implementation (tensors in flash-attn layout, (batch, seqlen, heads, head_dim))::

    out = attn(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None, softmax_scale=None,
               cu_seqlens=None, max_seqlen=None)

Models whose q, k, v come from one fused projection call ``attn.packed(qkv, ...)`` with the same
keywords and qkv (B, N, 3, H, d) (or (total, 3, H, d) with cu_seqlens): ``flash`` then reads the
three in place and writes one packed gradient, so no pass copies them; the others get the views.

- ``key_padding_mask``: (B, N) bool, True = real token (keep), False = padding.
- Packed variable-length input (BERT unpadding): q, k, v are (total_tokens, H, d) and
  ``cu_seqlens`` (int32, (batch + 1,)) with ``max_seqlen`` describe the sequences; the output is
  packed the same way. ``flash`` runs such input natively (``kernels.flash_attn_varlen_func``);
  the other implementations pad, attend with a key-padding mask and unpad again.

Implementations: ``standard`` (materialized: scores, masks, fp32 softmax, torch dropout, matmul,
as Hugging Face / Megatron do), ``sdpa`` (torch.nn.functional.scaled_dot_product_attention),
``flash`` (our Triton kernel), ``blocksparse`` (our block-sparse Triton kernel, layout from config)
and ``auto`` (``flash`` on CUDA tensors, ``sdpa`` otherwise; resolved per call from q.device).
"""
from fa_train.attention.dispatch import (
    ATTENTION_IMPLS,
    Attention,
    attention_impl_names,
    build_attention,
    get_attention_fn,
    pad_input,
    resolve_impl,
    unpad_input,
)

__all__ = [
    "ATTENTION_IMPLS",
    "Attention",
    "attention_impl_names",
    "build_attention",
    "get_attention_fn",
    "pad_input",
    "resolve_impl",
    "unpad_input",
]
