"""TrainingClock: validation rows of metrics.csv carry training and elapsed seconds, training and
validation rows the tokens seen, and the clock continues across a resumed run."""
import csv
import os
from pathlib import Path

from hydra import compose, initialize_config_dir

from fa_train.train import CONFIG_DIR, REPO_ROOT, train

os.environ.setdefault("FA_TRAIN_ROOT", str(REPO_ROOT))


def _run(out: Path, steps: int, extra=()):
    data = ["data._target_=fa_train.data.fake.FakeLMDataModule", "data.vocab_size=64",
            "+data.n_train=64", "data.seq_len=16", "data.batch_size=4"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "experiment=default", f"paths.output_dir={out}", f"paths.log_dir={out.parent}",
            f"trainer.max_steps={steps}", "trainer.val_check_interval=2",
            "trainer.check_val_every_n_epoch=null", "trainer.limit_val_batches=1",
            "trainer.accelerator=cpu", "trainer.precision=32-true", "callbacks.progress=null",
            "callbacks.checkpoint.every_n_train_steps=2", "model.n_layer=1", "model.d_model=16",
            "model.n_head=2", *data, *extra])
    m = train(cfg)
    assert m["status"] == "ok", m.get("error")
    rows = list(csv.DictReader(open(Path(m["output_dir"]) / "metrics.csv")))
    return m, rows, [(float(r["time/train_s"]), float(r["time/elapsed_s"]))
                     for r in rows if r.get("time/train_s")]


def test_clock_logged_at_each_validation_and_resumed(tmp_path):
    first, _, times = _run(tmp_path / "a", 4)
    assert len(times) == 2
    for train_s, elapsed_s in times:
        assert 0 < train_s <= elapsed_s
    assert times[1][0] > times[0][0] and times[1][1] > times[0][1]
    _, _, resumed = _run(tmp_path / "b", 6, [f"resume={first['output_dir']}"])
    assert resumed[-1][0] > times[-1][0] and resumed[-1][1] > times[-1][1]


def test_tokens_seen_on_training_and_validation_rows_across_resume(tmp_path):
    # 4 windows of 16 tokens per micro-batch, 2 micro-batches per optimizer step: 128 tokens a step
    extra = ["trainer.log_every_n_steps=1", "global_batch_size=8"]
    first, rows, _ = _run(tmp_path / "a", 4, extra)
    train = {int(r["step"]): float(r["tokens_seen"]) for r in rows if r.get("train/loss") and r.get("tokens_seen")}
    val = {int(r["step"]): float(r["tokens_seen"]) for r in rows if r.get("val/loss")}
    assert train == {0: 128, 1: 256, 2: 384, 3: 512}
    assert 3 in val and val == {s: 128 * (s + 1) for s in val}
    _, rows, _ = _run(tmp_path / "b", 6, [*extra, f"resume={first['output_dir']}"])
    val = {int(r["step"]): float(r["tokens_seen"]) for r in rows if r.get("val/loss")}
    assert 5 in val and val == {s: 128 * (s + 1) for s in val}
