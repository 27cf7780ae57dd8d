"""Attention benchmarks (fa-bench): dense attention (paper Figure 3), block-sparse runtime vs
density (Figure 2 right), kernel block size (Figure 2 middle), HBM traffic (Figure 2 left) and the
KV-cache decode step.

Plain functions for the recipe runner; each takes a config dataclass (or a dict of its fields)
and returns rows (list of dicts); the matching write_* function writes NAME.json, NAME.md and PNGs
into a directory given by the caller.
"""
from fa_train.bench.attention import (AttentionBenchConfig, run_attention_bench,
                                      write_attention_reports)
from fa_train.bench.blocksize import (BlocksizeBenchConfig, run_blocksize_bench,
                                      write_blocksize_reports)
from fa_train.bench.blocksparse import (BlocksparseBenchConfig, run_blocksparse_bench,
                                        write_blocksparse_reports)
from fa_train.bench.decode import DecodeBenchConfig, run_decode_bench, write_decode_reports
from fa_train.bench.io import IOBenchConfig, run_io_bench, write_io_reports
from fa_train.bench.report import load_rows, write_reports

__all__ = [
    "AttentionBenchConfig", "run_attention_bench", "write_attention_reports",
    "BlocksparseBenchConfig", "run_blocksparse_bench", "write_blocksparse_reports",
    "BlocksizeBenchConfig", "run_blocksize_bench", "write_blocksize_reports",
    "IOBenchConfig", "run_io_bench", "write_io_reports",
    "DecodeBenchConfig", "run_decode_bench", "write_decode_reports",
    "write_reports", "load_rows",
]
