"""The approximate baselines in the attention benchmark: timed and measured, never checked
against exact attention, no FLOP count, and what they lack reported as unsupported."""
from fa_train.bench import run_attention_bench
from fa_train.bench.impls import BASELINE_IMPL_NAMES

TINY = dict(seqlens=[32, 48], head_dims=[8], causal=[0, 1], tokens=96, hidden=16, dtype="fp32",
            device="cpu", warmup_ms=0, rep_ms=1, progress=False, passes=["fwd", "fwd+bwd"])


def test_baselines_are_timed_without_a_reference_check_or_flops():
    rows = run_attention_bench(dict(TINY, impls=list(BASELINE_IMPL_NAMES), padding=True))
    assert {r["impl"] for r in rows} == set(BASELINE_IMPL_NAMES)
    unsupported = {(r["impl"], r["causal"]) for r in rows if r["status"] == "unsupported"}
    assert unsupported == {("linformer", 1), ("smyrf", 1)}
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(rows) - 2 * 2 * 2  # 2 unsupported (impl, causal) x 2 lengths x 2 passes
    for r in ok:
        assert r["ms"] > 0 and r["flops"] is None and r["tflops"] is None
        assert r["check_passed"] is None
    first = [r for r in ok if r["seqlen"] == 32]
    assert all(r["check_note"] == "skipped: approximate attention" for r in first)


def test_linformer_is_built_for_each_sequence_length():
    rows = run_attention_bench(dict(TINY, impls=["linformer"], causal=[0], dropout_p=0.1))
    assert [r["status"] for r in rows] == ["ok"] * 4
