"""train(): outputs, metrics.json, failure/OOM handling, exact resume, one CPU step per family."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from fa_train.train import CONFIG_DIR, REPO_ROOT, train

os.environ.setdefault("FA_TRAIN_ROOT", str(REPO_ROOT))  # as fa-train does: caches under the repo
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
try:
    from kernels import flash_attn_func  # noqa: F401
    HAS_FLASH = True
except ImportError:
    HAS_FLASH = False

CPU = ["trainer.accelerator=cpu", "trainer.devices=1", "trainer.precision=32-true",
       "trainer.strategy=auto", "callbacks.progress=null", "trainer.log_every_n_steps=1"]
TINY_CLS = ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "model.d_ff=32"]
FAKE = "fa_train.data.fake."


def make_cfg(tmp_path, experiment, overrides=(), data=None, steps=1):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"experiment={experiment}", f"paths.output_dir={tmp_path / 'run'}",
            f"paths.log_dir={tmp_path}", f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps}", "trainer.check_val_every_n_epoch=null",
            "trainer.limit_val_batches=2", "trainer.limit_test_batches=2", *CPU, *overrides])
    if data is not None:
        with open_dict(cfg):
            cfg.data = OmegaConf.create(data)
    return cfg


def check_outputs(m, tmp_path):
    out = Path(m["output_dir"])
    assert m["status"] == "ok", m.get("error")
    for name in ("config.yaml", "metrics.json", "metrics.csv", "checkpoints/last.ckpt",
                 "loss_curve.png"):
        assert (out / name).exists(), name
    on_disk = json.loads((out / "metrics.json").read_text())
    for key in ("status", "global_step", "wall_time_s", "tokens_per_sec_per_device", "mfu",
                "peak_memory_gib", "attention", "n_params", "loss_start", "loss_end"):
        assert key in on_disk, key
    return on_disk


def test_default_job_real_data_short(tmp_path, monkeypatch):
    """The default job itself (real LMDataModule on the offline corpus), cut to a few steps; its
    metrics name the code's commit."""
    monkeypatch.setenv("FA_TRAIN_GIT_COMMIT", "0123abc")
    cfg = make_cfg(tmp_path, "default", ["data.seq_len=64", "data.batch_size=4"], steps=4)
    m = check_outputs(train(cfg), tmp_path)
    assert m["git_commit"] == "0123abc"
    assert m["token_cache"].startswith("python-docs-bpe-")  # which corpus and tokenizer it read
    assert m["attention"] == ("flash" if torch.cuda.is_available() else "sdpa")
    assert m["global_step"] == 4 and "val/loss" in m and "val/ppl" in m
    assert m["tokens_per_sec_per_device"] > 0


def test_document_mask_takes_the_end_of_document_token_from_the_data(tmp_path):
    cfg = make_cfg(tmp_path, "default", ["data.seq_len=64", "data.batch_size=4", "model.document_mask=true"],
                   steps=2)
    m = check_outputs(train(cfg), tmp_path)
    model = yaml.safe_load((Path(m["output_dir"]) / "config.yaml").read_text())["model"]
    assert model["document_mask"] is True and model["eot_id"] == 0   # the tokenizer's <|endoftext|>


def fake_lm(**kw):
    return {"_target_": FAKE + "FakeLMDataModule", "batch_size": 4, "seq_len": 32,
            "vocab_size": 64, "n_train": 64, **kw}


@pytest.mark.parametrize("real_data", [False, True], ids=["fake-data", "real-lm-data"])
def test_exact_resume_same_step_same_data(tmp_path, real_data):
    """Stop at step 5, resume to 9 == run straight to 9, bit for bit (an epoch boundary at 6 for
    the fake data; the real LMDataModule's own resumable loader for the real data)."""
    base = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "data.seq_len=32",
            "data.batch_size=4", "trainer.val_check_interval=100",
            "callbacks.checkpoint.every_n_train_steps=3"]
    data = None if real_data else fake_lm(n_train=24)
    straight = train(make_cfg(tmp_path / "a", "default", base, data=data, steps=9))
    first = train(make_cfg(tmp_path / "b", "default", base, data=data, steps=5))
    resumed = train(make_cfg(tmp_path / "c", "default",
                             base + [f"resume={first['output_dir']}"], data=data, steps=9))
    assert resumed["resumed_from"].endswith("last.ckpt") and resumed["global_step"] == 9
    sa = torch.load(straight["checkpoint"], weights_only=False)["state_dict"]
    sc = torch.load(resumed["checkpoint"], weights_only=False)["state_dict"]
    for k in sa:
        torch.testing.assert_close(sa[k], sc[k], rtol=0, atol=0, msg=k)


def _csv_steps(path, column):
    import csv
    with open(path, newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get(column)]


SMALL = ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "trainer.val_check_interval=2",
         "callbacks.checkpoint.every_n_train_steps=3"]


def test_two_runs_in_the_same_second_get_their_own_folders(tmp_path):
    """Both ask for the same folder (as two runs started in one second did); neither mixes."""
    a = train(make_cfg(tmp_path, "default", SMALL, data=fake_lm(), steps=2))
    b = train(make_cfg(tmp_path, "default", SMALL + ["seed=7"], data=fake_lm(), steps=2))
    assert a["output_dir"] != b["output_dir"]
    assert Path(b["output_dir"]).name == "run_1"
    for m, seed in ((a, 1234), (b, 7)):
        out = Path(m["output_dir"])
        assert OmegaConf.load(out / "config.yaml").seed == seed
        assert json.loads((out / "metrics.json").read_text())["output_dir"] == str(out)


def test_resumed_run_continues_its_folder_with_one_metrics_csv(tmp_path):
    """Crash after step 5 with the last checkpoint at step 3: the resumed run redoes 4..5 in the
    same folder; metrics.csv has every step once, the loss history keeps the earlier points, and
    no versioned checkpoint copies appear."""
    data = fake_lm(n_train=24)
    first = train(make_cfg(tmp_path / "a", "default", SMALL, data=data, steps=3))
    out = Path(first["output_dir"])
    step3 = (out / "checkpoints" / "last.ckpt").read_bytes()
    train(make_cfg(tmp_path / "b", "default", SMALL + [f"resume={out}"], data=data, steps=5))
    (out / "checkpoints" / "last.ckpt").write_bytes(step3)  # the crash: step 4-5 not saved
    final = train(make_cfg(tmp_path / "c", "default", SMALL + [f"resume={out}"], data=data, steps=7))
    assert final["output_dir"] == str(out) and final["global_step"] == 7
    assert _csv_steps(out / "metrics.csv", "train/loss") == list(range(7))
    assert _csv_steps(out / "metrics.csv", "val/loss") == [1, 3, 5]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.ckpt"]
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]
    (history,) = [v for k, v in state.items() if "LossHistory" in k]
    assert [s for s, _ in history["train"]] == list(range(1, 8))
    assert [s for s, _ in history["val"]] == [2, 4, 6]
    assert (out / "loss_curve.png").is_file()


def test_paused_run_keeps_its_checkpoint_and_resume_finishes_it(tmp_path):
    """pause_after stops at the first step past the limit: status "paused", checkpoint written,
    no test pass; resume= continues to max_steps in the same folder and ends "ok"."""
    data = fake_lm(n_train=24)
    paused = train(make_cfg(tmp_path / "a", "default", SMALL + ["pause_after=1e-9", "run_test=true"],
                            data=data, steps=6))
    out = Path(paused["output_dir"])
    assert paused["status"] == "paused" and paused["global_step"] == 1
    assert not any(k.startswith("test/") for k in paused)
    assert json.loads((out / "metrics.json").read_text())["status"] == "paused"
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 1
    final = train(make_cfg(tmp_path / "b", "default", SMALL + [f"resume={out}", "run_test=true"],
                           data=data, steps=6))
    assert final["status"] == "ok" and final["global_step"] == 6 and "test/loss" in final
    assert final["output_dir"] == str(out)
    assert _csv_steps(out / "metrics.csv", "train/loss") == list(range(6))
    whole = train(make_cfg(tmp_path / "w", "default", SMALL, data=data, steps=6))
    assert final["epoch"] == whole["epoch"]  # the pause, mid-epoch, did not end an epoch


def test_pause_after_and_pause_at_must_be_positive(tmp_path):
    from fa_train.errors import UserError, check_run_config
    for bad in (0, -1, "soon", True):
        with pytest.raises(UserError, match="pause_after must be a positive number of minutes"):
            check_run_config(OmegaConf.create({"trainer": {}, "pause_after": bad}))
        with pytest.raises(UserError, match="pause_at must be a Unix time in seconds"):
            check_run_config(OmegaConf.create({"trainer": {}, "pause_at": bad}))


def test_pause_at_a_past_moment_pauses_at_the_first_step(tmp_path):
    paused = train(make_cfg(tmp_path / "a", "default", SMALL + ["pause_at=1"], data=fake_lm(n_train=24),
                            steps=6))
    assert paused["status"] == "paused" and paused["global_step"] == 1


def test_resume_auto_skips_a_run_with_another_model_shape(tmp_path, capsys):
    debug = train(make_cfg(tmp_path, "default", SMALL + ["model.n_layer=2"], data=fake_lm(), steps=2))
    m = train(make_cfg(tmp_path, "default", SMALL + ["resume=auto"], data=fake_lm(), steps=2))
    said = capsys.readouterr().out
    assert m["status"] == "ok" and m["resumed_from"] is None and m["output_dir"] != debug["output_dir"]
    assert "model.n_layer: 2 -> 1" in said and "starting fresh" in said
    again = train(make_cfg(tmp_path, "default", SMALL + ["resume=auto"], data=fake_lm(), steps=4))
    assert again["resumed_from"] == str(Path(m["output_dir"]) / "checkpoints" / "last.ckpt")
    assert again["output_dir"] == m["output_dir"] and again["global_step"] == 4


def test_a_datamodule_missing_a_spec_field_fails_naming_both(tmp_path):
    cfg = make_cfg(tmp_path, "lra/listops", TINY_CLS, data=fake_lm())
    with pytest.raises(ValueError) as err:
        train(cfg)
    msg = str(err.value)
    assert "FakeLMDataModule" in msg and "num_classes" in msg and "LRAClassifier" in msg


def test_failure_is_recorded_then_raised(tmp_path):
    cfg = make_cfg(tmp_path, "default", ["model.n_head=3"], data=fake_lm())
    with pytest.raises(Exception):
        train(cfg)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "failed" and "divisible" in m["error"]


def test_oom_is_recorded_not_raised(tmp_path, monkeypatch):
    from fa_train.tasks import LanguageModelingTask

    def boom(self, batch, stage):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80 GiB")
    monkeypatch.setattr(LanguageModelingTask, "step", boom)
    m = train(make_cfg(tmp_path, "default", [], data=fake_lm()))
    assert m["status"] == "oom" and "out of memory" in m["error"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "oom"


def test_global_batch_size_sets_accumulation(tmp_path):
    m = train(make_cfg(tmp_path, "default", ["global_batch_size=8", "model.n_layer=1"],
                       data=fake_lm(), steps=2))
    assert m["accumulate_grad_batches"] == 2 and m["global_batch_size"] == 8


# ---- one CPU run per experiment family, tiny shapes ------------------------------------------
@pytest.mark.skipif(not (HAS_FLASH and INTERPRET), reason="kernels.flash_attn_func not importable")
def test_gpt2_family_one_step_flash_interpreted(tmp_path):
    cfg = make_cfg(tmp_path, "gpt2/small", ["attention=flash",
        "model.n_layer=1", "model.d_model=32", "model.n_head=2", "global_batch_size=null"],
        data=fake_lm(batch_size=2, seq_len=32))
    m = check_outputs(train(cfg), tmp_path)
    assert m["attention"] == "flash" and m["experiment"] == "gpt2/small-flash"  # named after attention=


def test_gpt2_family_one_step_sdpa(tmp_path):
    cfg = make_cfg(tmp_path, "gpt2/medium", ["attention=sdpa", "logger=tensorboard",
        "model.n_layer=1", "model.d_model=32", "model.n_head=2", "global_batch_size=null"],
        data=fake_lm(batch_size=2, seq_len=32))
    check_outputs(train(cfg), tmp_path)
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents*"))


def test_bert_family_one_step(tmp_path):
    cfg = make_cfg(tmp_path, "bert/large", ["attention=standard",
        "model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_ff=64",
        "global_batch_size=null", "task.scheduler.warmup_steps=0"],
        data={"_target_": FAKE + "FakeMLMDataModule", "batch_size": 4, "seq_len": 32,
              "vocab_size": 50})
    m = check_outputs(train(cfg), tmp_path)
    assert "val/mlm_acc" in m


@pytest.mark.parametrize("experiment,data", [
    ("lra/listops", {"num_classes": 10}),
    ("lra/retrieval", {"num_towers": 2}),
    ("lra/pathfinder32", {"vocab_size": 256}),
])
def test_lra_family_one_step(tmp_path, experiment, data):
    cfg = make_cfg(tmp_path, experiment, ["attention=standard", *TINY_CLS], data={
        "_target_": FAKE + "FakeClassificationDataModule", "batch_size": 4, "seq_len": 32,
        "vocab_size": 20, **data})
    m = check_outputs(train(cfg), tmp_path)
    assert "test/acc" in m  # LRA runs evaluate the test split


def test_lra_listops_real_generator_one_step(tmp_path):
    """The real ListOps datamodule (generated, small n) through the real experiment config."""
    cfg = make_cfg(tmp_path, "lra/listops", TINY_CLS + ["attention=standard",
        "data.n_train=16", "data.n_val=4", "data.n_test=4", "data.gen_workers=1",
        "data.num_workers=0", "data.batch_size=4", f"paths.cache_dir={tmp_path / 'cache'}"])
    m = check_outputs(train(cfg), tmp_path)
    assert m["global_step"] == 1 and "test/acc" in m


def test_data_generation_reaching_pause_at_pauses_the_run_before_training(tmp_path):
    """A Pathfinder generation still going at pause_at stops the run as "paused" (the work kept in
    the cache for the next start); a resumed run that pauses there keeps its last record."""
    import shutil
    cache = tmp_path / "cache"
    base = TINY_CLS + ["attention=standard", "data.n_train=1100", "data.n_val=4", "data.n_test=4",
                       "data.gen_workers=1", "data.batch_size=4", f"paths.cache_dir={cache}"]
    early = train(make_cfg(tmp_path / "a", "lra/pathfinder32", base + ["pause_at=1"], steps=2))
    assert early["status"] == "paused" and early["error"] is None
    assert "generation paused" in early["paused_before_training"]
    assert "global_step" not in early and not Path(early["output_dir"], "checkpoints").exists()
    assert [p.name for p in (cache / "lra_pathfinder").iterdir() if p.suffix == ".partial"]
    done = check_outputs(train(make_cfg(tmp_path / "b", "lra/pathfinder32", base, steps=2)), tmp_path)
    assert done["global_step"] == 2
    shutil.rmtree(cache)   # a fresh machine: the images are made again
    again = train(make_cfg(tmp_path / "b", "lra/pathfinder32",
                           base + ["pause_at=1", f"resume={done['output_dir']}"], steps=4))
    assert again["status"] == "paused" and again["output_dir"] == done["output_dir"]
    assert again["global_step"] == 2 and again["val/acc"] == done["val/acc"]
    assert Path(done["output_dir"], "checkpoints", "last.ckpt").is_file()


@pytest.mark.skipif(not (HAS_FLASH and INTERPRET), reason="kernels.flash_attn_func not importable")
def test_lra_blocksparse_one_step_reports_density(tmp_path):
    cfg = make_cfg(tmp_path, "lra/pathfinder32", TINY_CLS + ["attention=blocksparse",
        "attention.block_size=16", "attention.global_size=0", "attention.butterfly_size=2"], data={
        "_target_": FAKE + "FakeClassificationDataModule", "batch_size": 2, "seq_len": 63,
        "vocab_size": 256})
    m = check_outputs(train(cfg), tmp_path)
    assert m["attention"] == "blocksparse"
    assert m["blocksparse_seqlen"] == 63  # 63 tokens (mean pooling: no CLS)
    assert 0 < m["blocksparse_density"] < 1


def test_longdoc_family_one_step(tmp_path):
    cfg = make_cfg(tmp_path, "longdoc/mimic", TINY_CLS + [
        "attention=sdpa", "model.position_repeat_base=16"], data={
        "_target_": FAKE + "FakeClassificationDataModule", "batch_size": 4, "seq_len": 48,
        "vocab_size": 30, "num_classes": 6, "multi_label": True})
    m = check_outputs(train(cfg), tmp_path)
    assert "val/micro_f1" in m and "test/micro_f1" in m


# ---- the command line ------------------------------------------------------------------------
def _fa_train():
    exe = Path(sys.executable).with_name("fa-train")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fa_train.train"]


def test_multirun_from_the_command_line(tmp_path):
    cmd = _fa_train() + ["-m", "data.seq_len=16,32", "trainer.max_steps=2",
                         f"paths.log_dir={tmp_path}", f"data._target_={FAKE}FakeLMDataModule",
                         "model.n_layer=1", "model.d_model=16", "model.n_head=2",
                         "trainer.val_check_interval=2", "trainer.limit_val_batches=1", *CPU]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = sorted((tmp_path / "default").glob("multirun_*/*/metrics.json"))
    assert len(runs) == 2
    lens = sorted(json.loads(p.read_text())["seq_len"] for p in runs)
    assert lens == [16, 32]


@pytest.mark.slow
@pytest.mark.parametrize("grad_dtype", ["fp32", "bf16"])  # bf16: gradients all-reduced in bf16
def test_ddp_two_cpu_processes_gloo(tmp_path, grad_dtype):
    cmd = _fa_train() + ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                         f"trainer.strategy.ddp_comm_hook.dtype={grad_dtype}",
                         "trainer.precision=32-true", "trainer.max_steps=3",
                         f"paths.log_dir={tmp_path}", f"data._target_={FAKE}FakeLMDataModule",
                         "model.n_layer=1", "model.d_model=16", "model.n_head=2",
                         "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
                         "callbacks.progress=null"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (m,) = [json.loads(p.read_text()) for p in (tmp_path / "default").glob("*/metrics.json")]
    assert m["status"] == "ok" and m["devices"] == 2 and m["global_step"] == 3


def test_missing_user_data_names_the_path(tmp_path):
    missing = tmp_path / "no-such-dir"
    cfg = make_cfg(tmp_path, "lra/text", TINY_CLS + ["attention=standard",f"paths.data_dir={missing}"])
    with pytest.raises(Exception) as err:
        train(cfg)
    assert str(missing) in str(err.value)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "failed" and str(missing) in m["error"]
    assert (tmp_path / "run" / "config.yaml").exists()


CLASSIFIER = dict(num_classes=2, vocab_size=256, n_head=2, d_ff=16, pos_emb="learned", pool="cls",
                  attention="sdpa")


def saved_classifier(tmp_path, **kw):
    """A tiny LRAClassifier and its weights saved as a run folder's checkpoints/last.ckpt."""
    from fa_train.models import LRAClassifier
    src = LRAClassifier(**CLASSIFIER, **kw)
    ck = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ck.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in src.state_dict().items()}}, ck)
    return src, ck


def test_init_from_checkpoint_interpolates_path_positions(tmp_path):
    from fa_train.models import LRAClassifier
    from fa_train.models.loading import load_init_weights
    kw = dict(n_layer=1, d_model=16)
    src, _ = saved_classifier(tmp_path, max_seq_len=16, image_size=4, **kw)
    dst = LRAClassifier(max_seq_len=64, image_size=8, **CLASSIFIER, **kw)
    load_init_weights(dst, tmp_path / "run")  # a run directory works too
    torch.testing.assert_close(dst.embed.weight, src.embed.weight)
    assert dst.pos_table.shape == (64, 16)


def test_init_from_weights_of_another_shape_are_one_clear_error(tmp_path):
    from fa_train.errors import UserError
    from fa_train.models import LRAClassifier
    from fa_train.models.loading import load_init_weights
    kw = dict(CLASSIFIER, max_seq_len=16, image_size=4)
    src, ck = saved_classifier(tmp_path, n_layer=2, d_model=16, max_seq_len=16, image_size=4)
    before = {k: v.clone() for k, v in LRAClassifier(n_layer=1, d_model=16, **kw).state_dict().items()}
    one_layer = LRAClassifier(n_layer=1, d_model=16, **kw)
    one_layer.load_state_dict(before)
    with pytest.raises(UserError, match=rf"^init_from {ck} does not fit this model: the checkpoint "
                                        r"holds 12 weights the model has not \(encoder\.layers\.1\.") as err:
        load_init_weights(one_layer, tmp_path / "run")
    assert "\n" not in str(err.value) and "and 9 more" in str(err.value)
    for k, v in one_layer.state_dict().items():               # nothing half-loaded
        torch.testing.assert_close(v, before[k])
    wider = LRAClassifier(n_layer=2, d_model=32, **kw)
    with pytest.raises(UserError, match=r"holds other shapes, its own against the model's: "
                                        r"cls_token \(1, 1, 16\) against \(1, 1, 32\), pos_table "
                                        r"\(16, 16\) against \(16, 32\)"):
        load_init_weights(wider, ck)
    src_sd = src.state_dict()
    del src_sd["head.0.weight"]
    torch.save(src_sd, tmp_path / "plain.pt")
    with pytest.raises(UserError, match=r"the checkpoint lacks 1 of the model's weights \(head\.0\.weight\)"):
        load_init_weights(LRAClassifier(n_layer=2, d_model=16, **kw), tmp_path / "plain.pt")


@pytest.mark.parametrize("experiment", ["gpt2/medium", "bert/large", "lra/pathx", "longdoc/mimic"])
def test_debug_smoke_cuts_any_experiment_to_a_cpu_run(experiment):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}", "debug=smoke",
                                           "attention=sdpa", "paths.output_dir=/tmp/unused"])
    assert cfg.trainer.accelerator == "cpu" and cfg.trainer.precision == "32-true"
    assert cfg.trainer.max_steps == 2 and cfg.callbacks.progress is None
    assert cfg.model.n_layer == 1 and cfg.model.d_model == 32 and cfg.data.batch_size == 2
    assert cfg.experiment_name == f"{experiment}-sdpa"  # named after its attention


def test_a_diverging_run_stops_and_says_so(tmp_path):
    """A learning rate that overflows the weights: the run stops at the first check after the
    weights stop being finite, records "diverged" and the step, runs no test pass, and keeps no
    checkpoint with non-finite weights."""
    from fa_train.callbacks.divergence import CHECK_EVERY
    m = train(make_cfg(tmp_path, "default", SMALL + ["task.optimizer.lr=1e30", "run_test=true",
                                                     "task.scheduler.warmup_steps=0"],
                       data=fake_lm(n_train=512), steps=4 * CHECK_EVERY))
    assert m["status"] == "diverged" and m["diverged_at_step"] == CHECK_EVERY == m["global_step"]
    assert "diverged by step" in m["error"] and not any(k.startswith("test/") for k in m)
    on_disk = json.loads(Path(m["output_dir"], "metrics.json").read_text())
    assert on_disk["status"] == "diverged"
    ckpt = Path(m["output_dir"], "checkpoints", "last.ckpt")   # saved every 3 steps when finite
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)["state_dict"]
        assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point())


def test_a_classifier_whose_head_died_stops_and_says_so(tmp_path):
    """Weights whose head has no active hidden unit for any input (as a run at chance left them):
    the run stops at the second check, records "stalled" and the step, and runs no test pass."""
    from fa_train.callbacks.divergence import CHECK_EVERY
    data = {"_target_": FAKE + "FakeClassificationDataModule", "batch_size": 4, "seq_len": 16,
            "vocab_size": 20, "num_classes": 2, "seed": 7}
    first = train(make_cfg(tmp_path / "a", "lra/listops", ["attention=standard", *TINY_CLS],
                           data=data))
    state = torch.load(Path(first["output_dir"], "checkpoints", "last.ckpt"), weights_only=False)
    state["state_dict"]["model.head.0.bias"].fill_(-1e3)
    torch.save(state, tmp_path / "dead.ckpt")
    m = train(make_cfg(tmp_path / "b", "lra/listops", [
        "attention=standard", *TINY_CLS, f"init_from={tmp_path / 'dead.ckpt'}", "run_test=true"],
        data=data, steps=3 * CHECK_EVERY))
    assert m["status"] == "stalled" and m["stalled_at_step"] == CHECK_EVERY
    assert m["global_step"] == CHECK_EVERY + 1   # the step checked is still taken
    assert "stalled by step" in m["error"] and not any(k.startswith("test/") for k in m)


def test_classification_tests_final_and_best_validation_weights(tmp_path):
    """A classification run tests its final weights (test/) and, again, the weights of its best
    val/acc (test_at_best_val/), which are those of the step recorded as best_val/step."""
    import csv

    from hydra.utils import instantiate

    from fa_train.tasks.base import batch_get
    cfg = make_cfg(tmp_path, "lra/listops", [
        "attention=standard", *TINY_CLS, "trainer.val_check_interval=2", "task.optimizer.lr=0.05",
        "task.scheduler.name=none"], steps=6, data={
        "_target_": FAKE + "FakeClassificationDataModule", "batch_size": 4, "seq_len": 32,
        "vocab_size": 20, "num_classes": 2, "seed": 7})
    m = check_outputs(train(cfg), tmp_path)
    out = Path(m["output_dir"])
    with open(out / "metrics.csv") as f:
        val = {int(r["step"]) + 1: float(r["val/acc"])  # the csv's step: optimizer steps - 1
               for r in csv.DictReader(f) if r.get("val/acc")}
    assert len(val) == 3 and m["best_val/step"] < m["global_step"]  # this run peaks early
    assert m["best_val/acc"] == max(val.values()) and val[m["best_val/step"]] == m["best_val/acc"]
    for key in ("test/acc", "test/loss", "test_at_best_val/acc", "test_at_best_val/loss"):
        assert key in m, key
    assert m["test_at_best_val/loss"] != m["test/loss"]  # other weights
    last = torch.load(out / "checkpoints/last.ckpt", weights_only=False)["callbacks"]
    assert {"best_value": m["best_val/acc"], "best_step": m["best_val/step"]} in last.values()
    best = torch.load(out / "checkpoints/best_weights.pt")
    assert (best["step"], best["value"]) == (m["best_val/step"], m["best_val/acc"])
    saved_cfg = OmegaConf.load(out / "config.yaml")
    dm, model = instantiate(saved_cfg.data), instantiate(saved_cfg.model)
    model.load_state_dict({k.removeprefix("model."): v for k, v in best["state_dict"].items()})
    dm.setup("fit")
    model.eval()
    right = total = 0
    with torch.no_grad():
        for _, batch in zip(range(2), dm.val_dataloader()):  # limit_val_batches=2
            labels = batch_get(batch, "labels")
            right += int((model(batch_get(batch, "input_ids"), batch_get(batch, "attention_mask"))
                          .argmax(-1) == labels).sum())
            total += len(labels)
    assert right / total == pytest.approx(m["best_val/acc"])
