"""Where a Pathfinder-32 training step spends its time.

The LRA classifier of experiment lra/pathfinder32_fly (2 layers, d 64, 2 heads of 32, batch 256
of 1,024 pixel tokens) trained at 16-19 ms per step and 3-4% MFU through `fa-train`, while its
FLOPs need about 1 ms: the table's Pathfinder runs took 20-60 GPU-minutes each. This probe times
the bare step (bf16 autocast, forward, cross-entropy, backward, fused AdamW; no data loader, no
trainer) per attention implementation, eager and compiled, with and without attention dropout,
and with an all-true key mask; each row gains the GPU busy time per step from torch.profiler and
the kernels that take the most GPU time. `--loader` also times the data module's train loader
alone; `--trainer` times fa-train itself (tokens/s of its PerfMonitor) per TRAINER_VARIANTS and
prints Lightning's simple profile (time per hook) of one more run; `--baseline-tree` adds the
same runs of another version of the code, alternated with this one.

Run on one NVIDIA H200 on 2026-11-28 (reports/bench/lra_train_step/): the bare step was GPU-bound
(10.6 ms, 10.3 of GPU work) but fa-train took 17.4 ms, its forward waiting on the GPU at the
model's all-true-mask check every step, so the host's hooks and logging added to the GPU time
instead of overlapping it. After the fix (kernels/NOTES.md, "Training steps"), 13.8 ms eager and
10.9 compiled (2026-11-28-ab/).

`--experiment` times another LRA experiment's step (e.g. lra/pathfinder64); `--dq-paths R` times
instead each implementation eager at the experiment's own attention dropout and no key mask, its
backward adding dQ by a pass of its own and by atomics in the dK/dV pass (both forced, whatever
`kernels.tuning.atomic_dq` picks), the two alternated R times; `--norm-impls R` likewise times
its LayerNorms by PyTorch and by the Triton kernels (model.norm_impl torch and fused).

Usage: python research/kernel_probes/lra_train_step.py OUT_DIR [--steps 30] [--impls flash sdpa]
       [--experiment lra/pathfinder32_fly] [--dq-paths R | --norm-impls R]
       [--loader] [--trainer [--trainer-overrides attention=sdpa ...] [--baseline-tree DIR]]
Writes OUT_DIR/lra_train_step.json and prints a table last. Runs on CPU too (small, for wiring).
"""
import argparse
import contextlib
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from fa_train.bench.train_step import gpu_busy
from fa_train.resources import config_dir, project_root
from kernels import tuning

EXPERIMENT = "lra/pathfinder32_fly"


def experiment_config(impl, experiment=EXPERIMENT):
    with initialize_config_dir(str(config_dir()), version_base=None):
        return compose("config", overrides=[f"experiment={experiment}", f"attention={impl}"])


@contextlib.contextmanager
def dq_path(dq):
    """The backward's dQ path: None as `tuning.atomic_dq` picks, "atomics" or "pass" forced."""
    chosen = tuning.atomic_dq
    if dq is not None:
        tuning.atomic_dq = lambda dropout_p, block_d: dq == "atomics"
    try:
        yield
    finally:
        tuning.atomic_dq = chosen


def build(cfg, attn_dropout, device, norm=None):
    torch.manual_seed(0)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    model_cfg.update(num_classes=2, vocab_size=256, max_seq_len=cfg.data.resolution ** 2,
                     attn_dropout=attn_dropout, **({"norm_impl": norm} if norm else {}))
    model = instantiate(model_cfg, _convert_="all").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    return model, opt


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_fn(model, opt, device, compiled):
    forward = torch.compile(model) if compiled else model

    def step(ids, mask, labels):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = F.cross_entropy(forward(ids, mask).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def measure(impl, compiled, attn_dropout, with_mask, args, device, dq=None, norm=None):
    with dq_path(dq):
        row = _measure(impl, compiled, attn_dropout, with_mask, args, device, norm)
    return {**row, **({"dq": dq} if dq else {}), **({"norm": norm} if norm else {})}


def _measure(impl, compiled, attn_dropout, with_mask, args, device, norm):
    cfg = experiment_config(impl, args.experiment)
    model, opt = build(cfg, attn_dropout, device, norm)
    batch_size = args.batch or cfg.data.batch_size
    n = cfg.data.resolution ** 2
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (batch_size, n), generator=gen).to(device)
    mask = torch.ones(batch_size, n, dtype=torch.bool, device=device) if with_mask else None
    labels = torch.randint(0, 2, (batch_size,), generator=gen).to(device)
    step = step_fn(model, opt, device, compiled)
    for _ in range(args.warmup):
        step(ids, mask, labels)
    sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step(ids, mask, labels)
    sync(device)
    row = {"impl": impl, "compiled": compiled, "attn_dropout": attn_dropout, "mask": with_mask,
           "batch": batch_size, "seq_len": n,
           "step_ms": (time.perf_counter() - start) / args.steps * 1e3}
    if device.type == "cuda":
        row["gpu_busy_ms"], row["top_kernels"] = gpu_busy(step, ids, mask, labels, top=5)
    return row


def loader_ms(args):
    """ms per batch of the experiment's train loader alone (its generated images, its workers),
    over a second pass so that the images are in the page cache, as in a training run."""
    cfg = experiment_config("flash", args.experiment)
    dm = instantiate(cfg.data, n_train=args.loader_images, n_val=64, n_test=64, _convert_="all")
    dm.setup()
    loader = dm.train_dataloader()
    for _ in loader:
        pass
    start, count = time.perf_counter(), 0
    for _ in loader:
        count += 1
    return {"num_workers": dm.num_workers, "batch": dm.batch_size,
            "ms_per_batch": (time.perf_counter() - start) / count * 1e3}


# fa-train itself on a smaller generated set; each variant one subprocess, "as run" first and last
TRAINER_VARIANTS = {
    "as run": [],
    "4 loader workers": ["data.num_workers=4"],
    "compiled": ["task.compile=true"],
    "as run again": [],
}


def trainer_ms(args, out):
    """ms per step of `fa-train experiment=...` per TRAINER_VARIANTS entry (its PerfMonitor's
    tokens/s, validation excluded), and Lightning's simple profile of one more "as run" run.
    With --baseline-tree, "as run" of that tree and of this one alternate twice first (A B A B)."""
    base = [f"experiment={args.experiment}", f"data.n_train={args.trainer_images}", "data.n_val=2560",
            "data.n_test=256", f"trainer.max_steps={args.trainer_steps}", "run_test=false",
            "callbacks.checkpoint.every_n_train_steps=1000000", *args.trainer_overrides]
    runs = [(name, extra, None) for name, extra in TRAINER_VARIANTS.items()]
    if args.baseline_tree:
        varied = [run for run in runs if run[1]]
        runs = [("as run", [], tree) for _ in range(2) for tree in (args.baseline_tree, None)] + varied
    runs.append(("profiled", ["+trainer.profiler._target_=lightning.pytorch.profilers.SimpleProfiler",
                              f"+trainer.profiler.dirpath={out}",
                              "+trainer.profiler.filename=simple_profile"], None))
    env = dict(os.environ)
    env.setdefault("FA_TRAIN_CACHE", str(project_root() / ".cache"))  # one generated set for all trees
    rows = []
    for k, (name, extra, tree) in enumerate(runs):
        run_dir = out / "trainer_runs" / f"run{k}"
        # `python -m` puts its working folder first on sys.path: a tree is imported by running there
        proc = subprocess.run([sys.executable, "-m", "fa_train.train", *base, *extra,
                               f"hydra.run.dir={run_dir.resolve()}"], capture_output=True, text=True,
                              env=env, cwd=pathlib.Path(tree).resolve() if tree else None)
        row = {"variant": name, "overrides": extra, "tree": "baseline" if tree else "this"}
        try:
            m = json.loads((run_dir / "metrics.json").read_text())
            row["step_ms"] = m["batch_size"] * m["seq_len"] / m["tokens_per_sec"] * 1e3
        except (OSError, KeyError, TypeError, ZeroDivisionError):
            row["error"] = (proc.stderr or proc.stdout)[-300:]
        rows.append(row)
        print(row, flush=True)
    profile = out / "fit-simple_profile.txt"
    if profile.exists():
        print("\n".join(profile.read_text().splitlines()[:30]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--impls", nargs="+", default=["flash", "sdpa", "standard"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--experiment", default=EXPERIMENT)
    p.add_argument("--dq-paths", type=int, default=0, metavar="ROUNDS",
                   help="time the backward's two dQ paths instead, alternated ROUNDS times")
    p.add_argument("--norm-impls", type=int, default=0, metavar="ROUNDS",
                   help="time the LayerNorm's two implementations instead, alternated ROUNDS times")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=None, help="default: the experiment's")
    p.add_argument("--loader", action="store_true")
    p.add_argument("--loader-images", type=int, default=12_800)
    p.add_argument("--trainer", action="store_true", help="also time fa-train per TRAINER_VARIANTS")
    p.add_argument("--trainer-images", type=int, default=51_200)
    p.add_argument("--trainer-steps", type=int, default=800)
    p.add_argument("--trainer-overrides", nargs="*", default=[], help="added to every fa-train run")
    p.add_argument("--baseline-tree", default=None,
                   help="a folder holding another version's fa_train/, kernels/ and configs/ to A/B")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.dq_paths and args.norm_impls:
        p.error("give --dq-paths or --norm-impls, not both")
    if args.dq_paths or args.norm_impls:
        dropout = experiment_config(args.impls[0], args.experiment).model.attn_dropout
        cases = [(impl, False, dropout, False, dq, None) for _ in range(args.dq_paths)
                 for impl in args.impls for dq in ("pass", "atomics")]
        cases += [(impl, False, dropout, False, None, norm) for _ in range(args.norm_impls)
                  for impl in args.impls for norm in ("torch", "fused")]
    else:
        cases = [(impl, compiled, 0.1, True, None, None) for impl in args.impls
                 for compiled in (False, True)]
        cases += [(args.impls[0], False, 0.0, True, None, None),
                  (args.impls[0], False, 0.1, False, None, None)]
    rows = []
    for *case, dq, norm in cases:
        try:
            rows.append(measure(*case, args, device, dq, norm))
        except Exception as e:  # one failing variant must not hide the others' rows
            rows.append(dict(zip(("impl", "compiled", "attn_dropout", "mask", "dq", "norm"),
                                 (*case, dq, norm)), error=f"{type(e).__name__}: {str(e)[:200]}"))
        print(rows[-1], flush=True)
    info = {"experiment": args.experiment,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "rows": rows, "loader": loader_ms(args) if args.loader else None,
            "trainer": trainer_ms(args, out) if args.trainer else None}
    (out / "lra_train_step.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['device']}, torch {info['torch']}; {args.experiment}, bare step")
    print(f"{'impl':11} {'compiled':8} {'attn drop':9} {'mask':5} {'dQ':7} {'norm':6} "
          f"{'step ms':>8} {'GPU busy ms':>11}")
    for r in rows:
        head = (f"{r['impl']:11} {r['compiled']!s:8} {r['attn_dropout']:<9} {r['mask']!s:5} "
                f"{r.get('dq') or 'chosen':7} {r.get('norm') or 'auto':6}")
        if "error" in r:
            print(f"{head} {r['error']}")
            continue
        busy = f"{r['gpu_busy_ms']:.2f}" if "gpu_busy_ms" in r else "-"
        print(f"{head} {r['step_ms']:8.2f} {busy:>11}")
    if info["loader"]:
        print(f"train loader alone: {info['loader']['ms_per_batch']:.2f} ms per batch of "
              f"{info['loader']['batch']} ({info['loader']['num_workers']} workers)")
    for r in info["trainer"] or []:
        result = f"{r['step_ms']:.2f} ms per step" if "step_ms" in r else r["error"].splitlines()[-1]
        print(f"fa-train, {r['tree']:8} {r['variant']:18} {result}")


if __name__ == "__main__":
    main()
