"""Block-sparse attention benchmark (paper Figure 2 right): runtime vs density and vs N.

Our kernels.blocksparse_attn_func with butterfly layouts (kernels.layouts) against our dense
kernels.flash_attn_func and FlexAttention given the SAME block mask (block (i, j) allowed iff
layout[i, j]); FlexAttention's dense row allows every block. Effective FLOPs = density x dense
(non-causal) FLOPs; ratio_to_dense = time / time of our dense flash on the same shape, causal flag
and pass.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch

from fa_train.bench.attention import _check_list, make_inputs, shape_for
from fa_train.bench.common import (CHECK_TOLERANCE, PASSES, RunOptions, environment, make_progress,
                                   parse_dtype, resolve_device)
from fa_train.bench.impls import (AttentionImpl, Built, Case, FlexImpl, RegistryImpl, _from_bhnd,
                                  _leaves_bhnd, flex_attention_fn, flex_block_mask)
from fa_train.bench.report import Plot, Table, write_reports
from fa_train.bench.runner import measure, reference_output
from fa_train.metrics.flops import attention_flops
from kernels.layouts import LayoutSpec, density, num_blocks

BLOCKSPARSE_IMPLS = ("blocksparse", "flash", "flex")


def max_factors(seqlen, block):
    nb = num_blocks(seqlen, block)
    return (1 << (nb - 1).bit_length()).bit_length() - 1


def layout_for_density(seqlen, block, target):
    """The LayoutSpec, butterfly (all factors that fit) plus global blocks, whose layout's density
    is closest to `target`; below the full butterfly's density, fewer factors."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"density target must be in (0, 1], got {target}")
    k_max = max_factors(seqlen, block)
    candidates = [LayoutSpec(block_size=block, n_factors=k) for k in range(k_max + 1)]

    def dens(spec):
        return density(spec.build(seqlen))
    if dens(candidates[-1]) < target:
        lo, hi = 0, num_blocks(seqlen, block)  # smallest global_size reaching the target
        while lo < hi:
            mid = (lo + hi) // 2
            if dens(LayoutSpec(block_size=block, n_factors=k_max, global_size=mid)) >= target:
                hi = mid
            else:
                lo = mid + 1
        candidates += [LayoutSpec(block_size=block, n_factors=k_max, global_size=g)
                       for g in {max(lo - 1, 0), lo}]
    return min(candidates, key=lambda s: (abs(dens(s) - target), -s.n_factors, s.global_size))


def expand_layout(layout, block, seqlen):
    """(N, N) token-level bool mask of a block layout."""
    return layout.repeat_interleave(block, 0)[:seqlen].repeat_interleave(block, 1)[:, :seqlen]


def blocksparse_impl(spec):
    """Our block-sparse attention (fa_train.attention's ``blocksparse``) over `spec`'s layout."""
    return RegistryImpl("blocksparse", {"impl": "blocksparse", **asdict(spec)})


class FlexBlocksparseImpl(AttentionImpl):
    """FlexAttention with a BlockMask of the same layout, (B, H, N, d)."""
    name = "flex"

    def __init__(self, layout, block):
        self.layout, self.block = layout, block

    def check_support(self, case):
        FlexImpl().check_support(case)

    def build(self, case, q, k, v, dropout_p):
        attn = flex_attention_fn(case.device)
        mask = flex_block_mask(case.seqlen, self.block, causal=case.causal, layout=self.layout,
                               device=case.device)
        leaves = _leaves_bhnd(q, k, v)
        return Built(lambda: attn(*leaves, block_mask=mask), leaves, _from_bhnd)


@dataclass
class BlocksparseBenchConfig(RunOptions):
    seqlens: list = field(default_factory=lambda: [4096, 16384, 65536])
    head_dims: list = field(default_factory=lambda: [64, 128])
    factors: list = None  # ints or "max"; default [1, 2, 3, 4, "max"] unless densities given
    densities: list = None
    layouts: list = None  # LayoutSpec mappings (block_size defaults to `block`), any pattern
    block: int = 128
    causal: list = field(default_factory=lambda: [False])
    dropout_p: float = 0.0
    impls: list = field(default_factory=lambda: list(BLOCKSPARSE_IMPLS))
    passes: list = field(default_factory=lambda: ["fwd", "fwd+bwd"])
    dtype: str = "bf16"
    tokens: int = 65536  # enough GPU work per call to hide host time
    hidden: int = 2048

    def validate(self):
        self.seqlens = sorted(_check_list("seqlens", self.seqlens, positive=True))
        self.head_dims = _check_list("head_dims", self.head_dims, positive=True)
        self.impls = _check_list("impls", self.impls, allowed=BLOCKSPARSE_IMPLS)
        self.passes = _check_list("passes", self.passes, allowed=PASSES)
        self.causal = [bool(c) for c in _check_list("causal", self.causal, allowed=(0, 1))]
        if not 0.0 <= float(self.dropout_p) < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {self.dropout_p}")
        _check_list("block", [self.block], positive=True)
        _check_list("tokens", [self.tokens], positive=True)
        _check_list("hidden", [self.hidden], positive=True)
        parse_dtype(self.dtype)
        if sum(x is not None for x in (self.factors, self.densities, self.layouts)) > 1:
            raise ValueError("give one of factors, densities and layouts")
        if self.layouts is not None:
            self.layouts = [self.layout_spec(m) for m in _check_list("layouts", self.layouts)]
        elif self.densities is not None:
            for d in _check_list("densities", self.densities):
                if not 0.0 < float(d) <= 1.0:
                    raise ValueError(f"densities: {d!r} is not in (0, 1]")
        else:
            factors = self.factors if self.factors is not None else [1, 2, 3, 4, "max"]
            self.factors = []
            for f in _check_list("factors", factors):
                if f == "max":
                    self.factors.append("max")
                    continue
                try:
                    value = int(f)
                except (TypeError, ValueError):
                    raise ValueError(f"factors: {f!r} is not an integer or 'max'") from None
                if value < 0:
                    raise ValueError(f"factors: {value} is negative")
                self.factors.append(value)
        for d in self.head_dims:
            if self.hidden % d:
                raise ValueError(f"hidden {self.hidden} is not divisible by head dim {d}")
        resolve_device(self.device)
        return self

    def layout_spec(self, mapping):
        """A LayoutSpec from a mapping of its fields, at this benchmark's block size unless the
        mapping names one."""
        if isinstance(mapping, LayoutSpec):
            return mapping
        names = [f.name for f in fields(LayoutSpec)]
        if not isinstance(mapping, dict) or set(mapping) - set(names):
            raise ValueError(f"layouts: {mapping!r} is not a mapping of LayoutSpec fields {names}")
        return LayoutSpec.from_config({"block_size": self.block, **mapping})


def layout_specs(config, seqlen):
    """[(label, LayoutSpec, its layout or the error text, target density)] for one seqlen."""
    if config.layouts is not None:
        labelled = [(spec.label(), spec, None) for spec in config.layouts]
    elif config.densities is not None:
        labelled = [(f"density~{target:g}", layout_for_density(seqlen, config.block, float(target)),
                     float(target)) for target in config.densities]
    else:
        k_max = max_factors(seqlen, config.block)
        labelled = [(f"k={k}", LayoutSpec(block_size=config.block, n_factors=k), None)
                    for k in dict.fromkeys(k_max if f == "max" else f for f in config.factors)]
    specs = []
    for label, spec, target in labelled:
        try:
            specs.append((label, spec, spec.build(seqlen), target))
        except ValueError as exc:
            specs.append((label, spec, str(exc), target))
    return specs


def dense_impls(config, seqlen):
    """[(name, impl)] timed on the dense layout: our dense kernel, and FlexAttention with every
    block allowed, so that each block-sparse rate has its own kernel's dense rate beside it."""
    impls = [("flash", RegistryImpl("flash", "flash"))] if "flash" in config.impls else []
    if "flex" in config.impls:
        nb = num_blocks(seqlen, config.block)
        impls.append(("flex", FlexBlocksparseImpl(torch.ones(nb, nb, dtype=torch.bool),
                                                  config.block)))
    return impls


def run_blocksparse_bench(config):
    if isinstance(config, dict):
        config = BlocksparseBenchConfig(**config)
    config.validate()
    device = resolve_device(config.device)
    dtype = parse_dtype(config.dtype)
    tolerance = CHECK_TOLERANCE[config.dtype]
    rows = []
    groups = [(n, d, c) for n in config.seqlens for d in config.head_dims for c in config.causal]
    specs_by_n = {n: layout_specs(config, n) for n in config.seqlens}
    total = sum(len(specs_by_n[n]) * len([i for i in config.impls if i != "flash"])
                + len(dense_impls(config, n)) for n, _, _ in groups)
    with make_progress(config.progress, total, "blocksparse") as bar:
        for seqlen, head_dim, causal in groups:
            batch, heads = shape_for(config.tokens, config.hidden, seqlen, head_dim)
            q, k, v = make_inputs(batch, seqlen, heads, head_dim, dtype, device, config.seed)
            case = Case(batch, seqlen, heads, head_dim, causal, float(config.dropout_p), False,
                        dtype, device)
            base = {"bench": "blocksparse", "batch": batch, "seqlen": seqlen, "heads": heads,
                    "head_dim": head_dim, "causal": int(causal), "dropout_p": case.dropout_p,
                    "dtype": config.dtype, "block": config.block}
            dense_flops = {p: attention_flops(batch, seqlen, seqlen, heads, head_dim,
                                              causal=False, mode=p) for p in config.passes}
            for name, impl in dense_impls(config, seqlen):
                bar.describe(f"{name} dense d={head_dim} N={seqlen}")
                for m in measure(impl, case, q, k, v, config.passes, check=config.check,
                                 tolerance=tolerance, warmup_ms=config.warmup_ms,
                                 rep_ms=config.rep_ms):
                    flops = attention_flops(batch, seqlen, seqlen, heads, head_dim, causal=causal,
                                            mode=m["pass"])
                    rows.append(base | {"impl": name, "layout": "dense", "n_factors": None,
                                        "global_size": None, "density": 1.0,
                                        "target_density": None, "flops": flops} | m)
                bar.advance()
            for label, spec, layout, target in specs_by_n[seqlen]:
                n_factors, global_size = spec.n_factors, spec.global_size
                block_row = base | {"block": spec.block_size}
                if isinstance(layout, str):  # the layout itself is invalid for this seqlen
                    for name in config.impls:
                        if name != "flash":
                            rows.extend(block_row | {"impl": name, "layout": label,
                                                     "n_factors": n_factors,
                                                     "global_size": global_size, "density": None,
                                                     "target_density": target, "pass": p,
                                                     "status": "unsupported", "reason": layout}
                                        for p in config.passes)
                            bar.advance()
                    continue
                layout = spec.build(seqlen, causal)
                dens = density(layout)
                token_mask = None
                if config.check and seqlen <= 8192:
                    token_mask = expand_layout(layout, spec.block_size, seqlen).to(device)

                def reference(case_, q_, k_, v_, mask=token_mask):
                    return reference_output(case_, q_, k_, v_, attn_mask=mask[None, None])
                for name in config.impls:
                    if name == "flash":
                        continue
                    impl = (blocksparse_impl(spec) if name == "blocksparse"
                            else FlexBlocksparseImpl(layout, spec.block_size))
                    bar.describe(f"{name} {label} d={head_dim} N={seqlen}")
                    for m in measure(impl, case, q, k, v, config.passes,
                                     check=token_mask is not None, tolerance=tolerance,
                                     warmup_ms=config.warmup_ms, rep_ms=config.rep_ms,
                                     reference=reference):
                        rows.append(block_row | {"impl": name, "layout": label,
                                                 "n_factors": n_factors,
                                                 "global_size": global_size, "density": dens,
                                                 "target_density": target,
                                                 "flops": dens * dense_flops[m["pass"]]} | m)
                    bar.advance()
            del q, k, v
    return add_derived(rows)


def add_derived(rows):
    """Effective TFLOP/s and the ratio to our dense flash on the same shape and pass."""
    dense = {(r["seqlen"], r["head_dim"], r["causal"], r["pass"]): r["ms"] for r in rows
             if r["impl"] == "flash" and r.get("status") == "ok"}
    for r in rows:
        ms = r.get("ms") if r.get("status") == "ok" else None
        r["tflops_effective"] = r["flops"] / (ms * 1e-3) / 1e12 if ms and r.get("flops") else None
        dense_ms = dense.get((r["seqlen"], r["head_dim"], r["causal"], r["pass"]))
        r["dense_ms"] = dense_ms
        r["ratio_to_dense"] = ms / dense_ms if ms and dense_ms else None
    return rows


BLOCKSPARSE_TABLES = (
    Table("Effective TFLOP/s (density × dense FLOPs / time)",
          ("head_dim", "causal", "seqlen", "pass", "layout", "density"), "impl", "tflops_effective",
          ".1f"),
    Table("Runtime, ms (median)", ("head_dim", "causal", "seqlen", "pass", "layout", "density"),
          "impl", "ms", ".3f"),
    Table("Runtime / dense flash runtime", ("head_dim", "causal", "seqlen", "pass", "layout",
                                            "density"), "impl", "ratio_to_dense", ".3f"),
)


def blocksparse_plots(passes):
    plots = []
    for p in passes:
        tag = p.replace("+", "_")
        plots.append(Plot(f"blocksparse_runtime_vs_density_{tag}.png", "density", "ms", ("impl",),
                          ("head_dim", "seqlen", "causal"), {"pass": p},
                          f"{p} runtime vs density (Figure 2 right)", "density", "runtime (ms)",
                          logx=False, logy=False))
        plots.append(Plot(f"blocksparse_runtime_vs_seqlen_{tag}.png", "seqlen", "ms",
                          ("impl", "layout"), ("head_dim", "causal"), {"pass": p},
                          f"{p} runtime vs sequence length", "sequence length N", "runtime (ms)"))
    return plots


def write_blocksparse_reports(rows, out_dir, config, name="blocksparse"):
    if isinstance(config, dict):
        config = BlocksparseBenchConfig(**config)
    notes = [
        f"Butterfly layouts at block {config.block} (kernels.layouts.LayoutSpec; k = number "
        "of XOR factors, density in the rows). FlexAttention runs the same block mask; its "
        "dense row allows every block.",
        f"dtype {config.dtype}; dropout {config.dropout_p} (FlexAttention has none; the "
        "correctness guard runs without it).",
        "Effective FLOPs = density × dense non-causal FLOPs (4·B·H·N²·d forward; fa_train.metrics."
        "flops); ratio_to_dense = runtime / runtime of our dense flash on the same shape and pass.",
    ]
    return write_reports(rows, out_dir, name, environment(torch.device(config.device)),
                         asdict(config), BLOCKSPARSE_TABLES, blocksparse_plots(config.passes), notes)
