"""TrainingClock: validation rows of metrics.csv carry training and elapsed seconds, and the clock
continues across a resumed run."""
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
    return m, [(float(r["time/train_s"]), float(r["time/elapsed_s"]))
               for r in rows if r.get("time/train_s")]


def test_clock_logged_at_each_validation_and_resumed(tmp_path):
    first, times = _run(tmp_path / "a", 4)
    assert len(times) == 2
    for train_s, elapsed_s in times:
        assert 0 < train_s <= elapsed_s
    assert times[1][0] > times[0][0] and times[1][1] > times[0][1]
    _, resumed = _run(tmp_path / "b", 6, [f"resume={first['output_dir']}"])
    assert resumed[-1][0] > times[-1][0] and resumed[-1][1] > times[-1][1]
