"""Measure one implementation on one case: correctness guard, then each pass timed.

Failures never stop a run: an implementation that cannot run a case gives rows with status
"unsupported" (and the reason), running out of GPU memory gives "OOM", a failed correctness guard
gives "incorrect" (not timed), anything else "error"; memory is freed before the next case.
"""
from __future__ import annotations

import torch

from fa_train.bench.common import (CHECK_HEADS, CHECK_MAX_SEQLEN, Unsupported, bench_time,
                                   captured_warnings, free_memory, host_time,
                                   warning_texts, is_oom, peak_memory,
                                   relative_error, short_reason)

MEASURE_KEYS = ("pass", "status", "reason", "ms", "ms_p20", "ms_p80", "host_ms", "peak_mem_bytes",
                "peak_mem_gib", "mem_before_bytes", "mem_over_inputs_gib")
# Error texts meaning "this implementation has no kernel for this case" (torch SDPA backends).
UNSUPPORTED_PATTERNS = ("No available kernel", "No viable backend")
CHECK_KEYS = ("check_rel_err", "check_passed", "check_shape", "check_note")


def classify(exc, caught=()):
    """(status, reason) for an exception raised by an implementation."""
    if isinstance(exc, Unsupported):
        return "unsupported", str(exc)
    if is_oom(exc):
        return "OOM", short_reason(exc, 200)
    text = str(exc)
    if isinstance(exc, NotImplementedError) or any(p in text for p in UNSUPPORTED_PATTERNS):
        reason = short_reason(exc)
        texts = warning_texts(caught)
        if texts:
            reason += " | " + " | ".join(dict.fromkeys(texts))[:500]
        return "unsupported", reason
    return "error", short_reason(exc)


def reference_output(case, q, k, v, attn_mask=None):
    """float64 ground truth (kernels.reference_attention) on (B, N, H, d) inputs."""
    from kernels import reference_attention
    mask = case.key_padding_mask
    out, _ = reference_attention(q.double(), k.double(), v.double(), causal=case.causal,
                                 key_padding_mask=None if mask is None else mask[: q.shape[0]],
                                 attn_mask=attn_mask,
                                 window_size=case.window_size)
    return out


def run_check(built, case, q, k, v, tolerance, reference=reference_output):
    """Compare the first CHECK_HEADS heads of batch element 0 with the float64 reference.

    Padded query rows are left out (a packed varlen kernel has no output there). The output
    comes from the implementation run without dropout (built by the caller with dropout 0).
    """
    heads = min(CHECK_HEADS, case.heads)
    info = {"check_shape": [1, case.seqlen, heads, case.head_dim], "check_note": None}
    if case.seqlen > CHECK_MAX_SEQLEN:
        info.update(check_rel_err=None, check_passed=None,
                    check_note=f"skipped: seqlen > {CHECK_MAX_SEQLEN}")
        return info
    with torch.no_grad():
        out = built.to_bnhd(built.fn())[:1, :, :heads]
        sl = (slice(0, 1), slice(None), slice(0, heads))
        ref = reference(case, q[sl], k[sl], v[sl])
    rows = None
    if case.lengths is not None:
        rows = torch.arange(case.seqlen, device=out.device) < case.lengths[0]
        out, ref = out[0][rows][None], ref[0][rows.to(ref.device)][None]
    err = relative_error(out, ref.to(out.device))
    info.update(check_rel_err=err, check_passed=bool(err <= tolerance))
    if case.dropout_p > 0:
        info["check_note"] = "checked with dropout off"
    return info


def pass_fn(built, pass_name):
    fwd = built.fn
    if pass_name == "fwd":
        return fwd
    out = fwd()
    dout = torch.randn_like(out)
    if pass_name == "fwd+bwd":
        del out
        return lambda: fwd().backward(dout)
    return lambda: out.backward(dout, retain_graph=True)


def measure(impl, case, q, k, v, passes, *, check=True, tolerance=5e-2, warmup_ms=25, rep_ms=100,
            reference=reference_output, build_kwargs=None, timer="events"):
    """Rows (one per pass) holding MEASURE_KEYS and CHECK_KEYS for `impl` on `case`; `timer`:
    see common.bench_time."""
    rows = [dict.fromkeys(MEASURE_KEYS) | {"pass": p} for p in passes]
    check_info = dict.fromkeys(CHECK_KEYS)
    build_kwargs = build_kwargs or {}

    def fail_all(status, reason, start=0):
        for row in rows[start:]:
            row.update(status=status, reason=reason)

    built = None
    try:
        with captured_warnings() as caught:
            try:
                impl.check_support(case)
                if check and not impl.exact:
                    check_info["check_note"] = "skipped: approximate attention"
                elif check:
                    checker = impl.build(case, q, k, v, 0.0, **build_kwargs)
                    check_info.update(run_check(checker, case, q, k, v, tolerance, reference))
                    del checker
                built = impl.build(case, q, k, v, case.dropout_p, **build_kwargs)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a row
                status, reason = classify(exc, caught)
                fail_all(status, reason)
                return [r | check_info for r in rows]
        if check_info.get("check_passed") is False:
            fail_all("incorrect", f"relative error {check_info['check_rel_err']:.3g} against the "
                                  f"float64 reference exceeds {tolerance:g}; not timed")
            return [r | check_info for r in rows]
        for n, row in enumerate(rows):
            fn = None
            try:
                with captured_warnings() as caught:
                    try:
                        fn = pass_fn(built, row["pass"])
                        grads = built.leaves if row["pass"] != "fwd" else None
                        row.update(bench_time(fn, case.device, warmup_ms, rep_ms,
                                              grad_to_none=grads, timer=timer))
                        # up to 10 calls, about 20 ms of GPU work: long calls are never host-bound
                        row["host_ms"] = host_time(fn, case.device, grads,
                                                   calls=max(1, min(10, int(20 / row["ms"]))))
                        peak, before = peak_memory(fn, case.device)
                    except Exception as exc:  # noqa: BLE001
                        status, reason = classify(exc, caught)
                        row.update(status=status, reason=reason, ms=None, ms_p20=None, ms_p80=None)
                        if status == "OOM":
                            fn = None
                            free_memory(case.device)
                        continue
                row.update(status="ok", peak_mem_bytes=peak, mem_before_bytes=before,
                           peak_mem_gib=None if peak is None else peak / 2**30,
                           mem_over_inputs_gib=None if peak is None else (peak - before) / 2**30)
            finally:
                for leaf in built.leaves:
                    leaf.grad = None
                del fn
    finally:
        del built
        free_memory(case.device)
    return [r | check_info for r in rows]
