"""Learning must happen: the LRA ListOps model, trained for a minute on the CPU on a short version
of the task (expressions of at most 40 tokens, depth at most 3), beats the majority class on the
held-out split by a clear margin. A change that breaks learning (the model, the loss, the data
path, the optimizer or its schedule) fails here instead of in a long GPU run."""
import collections
import os

from hydra import compose, initialize_config_dir

from fa_train.data.lra import listops
from fa_train.train import CONFIG_DIR, REPO_ROOT, train

os.environ.setdefault("FA_TRAIN_ROOT", str(REPO_ROOT))
MARGIN = 0.15  # accuracy points over the majority class


def test_short_listops_is_learned_on_cpu(tmp_path):
    rows = listops.generate_listops(4000, seed=0, min_length=4, max_length=40, max_depth=3,
                                    max_args=5)
    splits = {"train": rows[:3000], "val": rows[3000:3500], "test": rows[3500:]}
    for split, part in splits.items():
        listops.write_tsv(tmp_path / "data" / listops.SPLIT_FILES[split], part)
    majority = max(collections.Counter(r[1] for r in splits["test"]).values()) / len(splits["test"])
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "experiment=lra/listops", "trainer=cpu", "attention=sdpa",
            f"data.data_dir={tmp_path / 'data'}", "data.max_length=40", "data.batch_size=64",
            "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.d_ff=128",
            "model.dropout=0.0", "model.attn_dropout=0.0", "task.optimizer.lr=1e-3",
            "task.scheduler.name=cosine", "task.scheduler.warmup_steps=50",
            "trainer.max_steps=200", "trainer.val_check_interval=200",
            "trainer.check_val_every_n_epoch=null", "callbacks.progress=null",
            f"paths.output_dir={tmp_path / 'run'}", f"paths.log_dir={tmp_path}"])
    m = train(cfg)
    assert m["status"] == "ok", m.get("error")
    assert m["test/acc"] >= majority + MARGIN, (m["test/acc"], majority)
