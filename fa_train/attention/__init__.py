"""Attention implementations behind one registry and one signature.

Every model calls attention through :func:`build_attention`, so switching
``attention=standard|sdpa|flash|blocksparse|auto`` changes nothing else: with the same weights
and dropout off, all implementations give the same outputs within floating-point tolerance.

Each implementation is a class (one module each) that owns its config, declares what it supports
(``supports``: causal, key_padding_mask, dropout, gqa, varlen; a call asking for anything else
gets a clear error) and is called with one signature, tensors in flash-attn layout
(batch, seqlen, heads, head_dim)::

    out = attn(q, k, v, causal=False, dropout_p=0.0, key_padding_mask=None, softmax_scale=None,
               cu_seqlens=None, max_seqlen=None)

Models whose q, k, v come from one fused projection call ``attn.packed(qkv, ...)`` with the same
keywords and qkv (B, N, 3, H, d) (or (total, 3, H, d) with cu_seqlens): ``flash`` then reads the
three in place and writes one packed gradient, so no pass copies them; the others get the views.

Inference calls ``attn.attend_cache(q, k, v, k_cache, v_cache, cache_seqlens, tree_parents=None)``:
the new tokens' k, v are written into a preallocated (B, capacity, H, d) cache and the new
tokens attend to it (fa_train.attention.cache: the PyTorch path; ``flash`` on CUDA runs
``kernels.flash_attn_with_kvcache``).

- ``key_padding_mask``: (B, N) bool, True = real token (keep), False = padding.
- Packed variable-length input (BERT unpadding): q, k, v are (total_tokens, H, d) and
  ``cu_seqlens`` (int32, (batch + 1,)) with ``max_seqlen`` describe the sequences; the output is
  packed the same way. ``flash`` runs such input natively (``kernels.flash_attn_varlen_func``);
  the other implementations pad, attend with a key-padding mask and unpad again.

Implementations: ``standard`` (materialized: scores, masks, fp32 softmax, torch dropout, matmul),
``sdpa`` (torch.nn.functional.scaled_dot_product_attention), ``flash`` (our Triton kernel; option
``deterministic``), ``blocksparse`` (our block-sparse Triton kernel; its options are the fields of
``kernels.layouts.LayoutSpec``, and ``stats()`` describes its layout), ``local`` (sliding-window
attention, the paper's Local Attention baseline: options ``window_left``, ``window_right``; our
flash kernels with a window where Triton runs, masked SDPA elsewhere) and ``auto`` (``flash`` on
CUDA tensors, ``sdpa`` otherwise; resolved per call from q.device).

The paper's approximate baselines (PyTorch ops; not exact, so they match the others only in their
exact special cases): ``linformer`` (learned sequence projections, an ``nn.Module`` whose E, F the
model trains; sized by the model's max_seq_len, which ``build_attention`` passes), ``linear``
(elu + 1 features), ``performer`` (FAVOR+ random features), ``reformer`` (LSH buckets, shared QK)
and ``smyrf`` (asymmetric-LSH balanced clusters). Its sparse baselines are block layouts of
``blocksparse`` (``layout``: longformer, bigbird, fixed, strided; configs
attention=longformer|bigbird|sparse_fixed|sparse_strided).
"""
from fa_train.attention.base import FEATURES, Attention
from fa_train.attention.padding import pad_input, unpad_input
from fa_train.attention.registry import (ATTENTION_CLASSES, attention_class, attention_names,
                                         build_attention)

__all__ = [
    "ATTENTION_CLASSES",
    "FEATURES",
    "Attention",
    "attention_class",
    "attention_names",
    "build_attention",
    "pad_input",
    "unpad_input",
]
