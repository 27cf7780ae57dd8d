"""Checkpoint files: atomic writes survive kill -9, corrupt files are detected, resume picks a
matching, readable checkpoint and says why it skipped others."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from fa_train.utils.checkpoints import (atomic_write, config_diff, find_resume_checkpoint,
                                        is_readable)

CFG = {"model": {"n_layer": 2, "d_model": 32, "vocab_size": None},
       "data": {"seq_len": 64, "num_workers": 0}}


def _run(root, name, cfg=CFG, age=0.0, corrupt=False):
    """A fake run folder with config.yaml and checkpoints/last.ckpt (mtime now - age)."""
    from omegaconf import OmegaConf
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    ck = run / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 3, "state_dict": {"w": torch.ones(4)}}, ck)
    if corrupt:
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    t = time.time() - age
    os.utime(ck, (t, t))
    return ck


def test_truncated_checkpoint_is_unreadable(tmp_path):
    good = _run(tmp_path, "a")
    bad = _run(tmp_path, "b", corrupt=True)
    assert is_readable(good) and not is_readable(bad)
    assert not is_readable(tmp_path / "missing.ckpt")


def test_auto_skips_a_truncated_newest_checkpoint(tmp_path):
    older = _run(tmp_path, "old", age=100)
    newer = _run(tmp_path, "new", corrupt=True)
    said = []
    found = find_resume_checkpoint("auto", CFG, tmp_path, log=said.append)
    assert found.path == older and found.run_dir == older.parent.parent
    assert any(str(newer) in s and "corrupt" in s for s in said)
    assert any("continuing from" in s and str(older) in s for s in said)


def test_a_truncated_checkpoint_falls_back_to_the_valid_one_beside_it(tmp_path):
    last = _run(tmp_path, "run", age=100)
    valid = last.with_name("step-3.ckpt")
    os.replace(last, valid)
    torch.save({"global_step": 5}, last)
    last.write_bytes(last.read_bytes()[:40])  # truncated, and newer than step-3.ckpt
    assert find_resume_checkpoint(tmp_path / "run", CFG, tmp_path, log=lambda s: None).path == valid
    with pytest.raises(ValueError, match="truncated or corrupt"):
        find_resume_checkpoint(last, CFG, tmp_path, log=lambda s: None)


def test_auto_only_takes_a_checkpoint_with_the_same_model_and_data(tmp_path):
    other = {"model": {"n_layer": 4, "d_model": 32, "vocab_size": 64}, "data": {"seq_len": 64}}
    _run(tmp_path, "debug-run", cfg=other)
    said = []
    assert find_resume_checkpoint("auto", CFG, tmp_path, log=said.append) is None
    assert any("model.n_layer: 4 -> 2" in s for s in said)
    assert any("starting fresh" in s for s in said)
    match = _run(tmp_path, "good", cfg=CFG, age=100)
    assert find_resume_checkpoint("auto", CFG, tmp_path, log=said.append).path == match


def test_explicit_resume_with_other_settings_names_the_keys(tmp_path):
    other = {"model": {"n_layer": 4, "d_model": 48}, "data": {"seq_len": 64, "num_workers": 8}}
    _run(tmp_path, "r", cfg=other)
    with pytest.raises(ValueError) as err:
        find_resume_checkpoint(tmp_path / "r", CFG, tmp_path, log=lambda s: None)
    assert "model.n_layer: 4 -> 2" in str(err.value) and "model.d_model: 48 -> 32" in str(err.value)
    assert "num_workers" not in str(err.value)  # runtime-only settings may change
    with pytest.raises(FileNotFoundError, match="nope"):
        find_resume_checkpoint(tmp_path / "nope", CFG, tmp_path)


def test_config_diff_ignores_fields_filled_later_and_runtime_keys():
    saved = {"model": {"n_layer": 2, "d_model": 32, "vocab_size": 64},
             "data": {"seq_len": 64, "num_workers": 4}}
    assert config_diff(CFG, saved) == []
    assert config_diff(CFG, {**saved, "data": {"seq_len": 128}}) == ["data.seq_len: 128 -> 64"]


def test_config_diff_reads_a_key_added_later_as_what_older_checkpoints_did():
    saved = {"model": {"n_layer": 2}, "data": {"seq_len": 64}}
    current = {"model": {"n_layer": 2, "pos_emb": "learned"}, "data": {"seq_len": 64}}
    assert config_diff(current, saved) == []
    current["model"]["pos_emb"] = "none"
    assert config_diff(current, saved) == ["model.pos_emb: 'learned' -> 'none'"]


def test_kill_9_during_a_checkpoint_write_leaves_the_previous_one(tmp_path):
    """A process writes checkpoint A, then dies (SIGKILL) half-way through writing B."""
    path = tmp_path / "checkpoints" / "last.ckpt"
    script = textwrap.dedent(f"""
        import os, signal, torch
        from fa_train.utils.checkpoints import atomic_write
        path = {str(path)!r}
        atomic_write(path, lambda tmp: torch.save({{"step": 1, "w": torch.ones(1000)}}, tmp))
        def half_then_die(tmp):
            torch.save({{"step": 2, "w": torch.zeros(1000)}}, tmp)
            data = open(tmp, "rb").read()
            open(tmp, "wb").write(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        atomic_write(path, half_then_die)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert is_readable(path)
    assert torch.load(path, weights_only=False)["step"] == 1
    leftovers = list(path.parent.glob("*.ckpt"))
    assert leftovers == [path]  # the half-written file is not a *.ckpt candidate for resume


def test_atomic_write_replaces_the_file(tmp_path):
    p = tmp_path / "a" / "f.bin"
    atomic_write(p, lambda t: t.write_bytes(b"one"))
    atomic_write(p, lambda t: t.write_bytes(b"two"))
    assert p.read_bytes() == b"two" and sorted(x.name for x in p.parent.iterdir()) == ["f.bin"]


def test_a_checkpoint_outside_a_run_folder_resumes_into_a_new_folder(tmp_path):
    ck = tmp_path / "loose.ckpt"
    torch.save({"global_step": 1}, ck)
    found = find_resume_checkpoint(ck, CFG, tmp_path, log=lambda s: None)
    assert found.path == ck and found.run_dir is None
