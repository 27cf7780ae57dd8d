"""Bad input is refused where it enters, in one line naming the key (or file) and what is valid,
and never touches an earlier run's files.

Each fa-train case runs the console entry point (``fa_train.train.main``) in-process with its
overrides and checks: exit status 2, stderr is exactly ``fa-train: error: ...``, and every file
of the earlier run under the same outputs/ is byte-for-byte unchanged.
"""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import datasets  # noqa: F401 - imported here, their log handlers write to the session's
import lightning  # noqa: F401 - stderr, not to the stderr one test captures and closes
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fa_train.errors import UserError, check_bool, check_float, check_int, check_run_config
from fa_train.train import main

REPO = Path(__file__).resolve().parents[1]
CPU = ["trainer.accelerator=cpu", "trainer.devices=1", "trainer.precision=32-true",
       "callbacks.progress=null"]
TINY = ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.n_head=2",
        "data.seq_len=16", "data.batch_size=2"]
FAKE_DATA = ["data._target_=fa_train.data.fake.FakeLMDataModule"]  # for checks after data setup

# (case id, overrides, expected error line after "fa-train: error: ")
CONFIG_CASES = [
    ("n_layer-negative", ["model.n_layer=-1"],
     "model.n_layer=-1 is invalid: expected an integer >= 1"),
    ("n_layer-zero", ["model.n_layer=0"], "model.n_layer=0 is invalid: expected an integer >= 1"),
    ("n_head-zero", ["model.n_head=0"], "model.n_head=0 is invalid: expected an integer >= 1"),
    ("d_model-not-multiple", ["model.n_head=3"],
     "model.d_model=32 is invalid: expected a value divisible by model.n_head=3"),
    ("dropout-above-one", ["model.dropout=1.5"],
     "model.dropout=1.5 is invalid: expected a number in [0, 1)"),
    ("loss_impl-unknown", ["model.loss_impl=magic"],
     "model.loss_impl='magic' is invalid: expected one of auto, fused, torch"),
    ("batch_size-zero", ["data.batch_size=0"],
     "data.batch_size=0 is invalid: expected an integer >= 1"),
    ("seq_len-negative", ["data.seq_len=-4", "model.max_seq_len=8"],
     "data.seq_len=-4 is invalid: expected an integer in [1, 65536]"),
    ("lr-negative", ["task.optimizer.lr=-0.001"],
     "task.optimizer.lr=-0.001 is invalid: expected a number in (0, inf]"),
    ("beta-one", ["task.optimizer.betas=[0.9,1.0]"],
     "task.optimizer.betas[1]=1.0 is invalid: expected a number in [0, 1)"),
    ("optimizer-unknown", ["task.optimizer.name=sgd"],
     "task.optimizer.name='sgd' is invalid: expected one of adamw, adam, lamb"),
    ("warmup-negative", ["task.scheduler.warmup_steps=-5"],
     "task.scheduler.warmup_steps=-5 is invalid: expected an integer >= 0"),
    ("max_steps-zero", ["trainer.max_steps=0"],
     "trainer.max_steps=0 is invalid: expected an integer >= 1"),
    ("global_batch_size-zero", ["global_batch_size=0"],
     "global_batch_size=0 is invalid: expected an integer >= 1"),
    ("n_layer-not-a-number", ["model.n_layer=abc"],
     "model.n_layer='abc' is invalid: expected an integer >= 1"),
    ("betas-not-a-pair", ["task.optimizer.betas=0.9"],
     "task.optimizer.betas=0.9 is invalid: expected a pair [beta1, beta2] of numbers in [0, 1)"),
    ("betas-three", ["task.optimizer.betas=[0.9,0.95,0.99]"],
     "task.optimizer.betas=[0.9, 0.95, 0.99] is invalid: expected a pair [beta1, beta2] of "
     "numbers in [0, 1)"),
    ("total_steps-negative", ["task.scheduler.total_steps=-5"],
     "task.scheduler.total_steps=-5 is invalid: expected an integer >= 1"),
    ("compile_mode-unknown", ["task.compile_mode=fast"],
     "task.compile_mode='fast' is invalid: expected one of default, reduce-overhead, "
     "max-autotune, max-autotune-no-cudagraphs"),
    ("seed-negative", ["seed=-1"], "seed=-1 is invalid: expected an integer in [0, 4294967295]"),
    ("threads-not-a-number", ["threads=abc"], "threads='abc' is invalid: expected an integer >= 1"),
    ("val_check_interval-zero", ["trainer.val_check_interval=0"],
     "trainer.val_check_interval=0 is invalid: expected an integer >= 1"),
    ("gradient_clip_val-negative", ["trainer.gradient_clip_val=-1.0"],
     "trainer.gradient_clip_val=-1.0 is invalid: expected a number in [0, inf]"),
    ("tokenizer-unknown", ["data.tokenizer=sentencepiece"],
     "data.tokenizer='sentencepiece' is invalid: expected one of bpe, gpt2, file, wordpiece"),
    ("vocab_size-below-bpe", ["data.vocab_size=100"],
     "data.vocab_size=100 is invalid: expected an integer >= 258"),
    ("train_samples_per_epoch-negative", ["data.train_samples_per_epoch=-5"],
     "data.train_samples_per_epoch=-5 is invalid: expected an integer >= 1"),
    ("val_fraction-above-one", ["data=lm_files", "data.data_files=absent.jsonl",
                                "data.val_fraction=1.5"],
     "data.val_fraction=1.5 is invalid: expected a number in [0, 1)"),
    ("mlm_probability-negative", ["data=mlm_default", "data.mlm_probability=-0.1"],
     "data.mlm_probability=-0.1 is invalid: expected a number in (0, 1]"),
    ("max_seq_len-below-seq_len", [*FAKE_DATA, "model.max_seq_len=8"],
     "model.max_seq_len=8 is invalid: expected an integer >= 16"),
    ("global_batch_size-not-multiple", [*FAKE_DATA, "global_batch_size=3"],
     "global_batch_size=3 is invalid: expected a multiple of data.batch_size (2) x devices (1)"),
    ("checkpoint-every-negative", [*FAKE_DATA, "callbacks.checkpoint.every_n_train_steps=-3"],
     "callbacks.checkpoint.every_n_train_steps=-3 is invalid: expected an integer >= 0"),
    ("trainer-value-lightning-refuses", ["trainer.devices=-3"],
     "trainer: `devices` selected with `CPUAccelerator` should be an int > 0."),
    ("attention-value-a-constructor-refuses", ["attention=blocksparse", "attention.block_size=0"],
     "attention.block_size must be >= 1, got 0"),
    ("flag-not-a-bool", ["model.bias=maybe"],
     "model.bias='maybe' is invalid: expected true or false"),
    ("unknown-key", ["model.n_layr=3"],
     "Could not override 'model.n_layr'. To append to your config use +model.n_layr=3 "
     "Key 'n_layr' is not in struct full_key: model.n_layr object_type=dict"),
]

# (case id, file name, file bytes or None for no file, data.source, expected error line)
DATA_FILE_CASES = [
    ("missing", "absent.jsonl", None, "json", "data file {path}: not found"),
    ("empty", "empty.jsonl", b"", "json", "data file {path}: is empty"),
    ("binary", "binary.txt", bytes(range(128, 256)) * 8, "text",
     "data file {path}: not UTF-8 text (undecodable byte at offset 0); expected a text file"),
    ("nul-bytes", "nul.txt", b"text\x00\x00\x01more", "text",
     "data file {path}: contains NUL bytes (binary?); expected a text file"),
    ("unparsable", "broken.jsonl", b"this is not json\n", "json",
     "data files {path}: unreadable as json (ValueError: {parser_message})"),
    ("wrong-field", "other.jsonl", b'{"body": "a"}\n{"body": "b"}\n{"body": "c"}\n', "json",
     "data files {path}: no field data.text_field='text' in split train (fields: body)"),
]


def _digest_tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line_error(code, err, expected):
    """Status 2 and the error as the last stderr line, alone: no traceback, no second error line
    (progress bars and library log lines may come before it)."""
    assert code == 2
    assert err[-1] == f"fa-train: error: {expected}"
    assert [line for line in err if "error" in line.lower() or "Traceback" in line] == [err[-1]]


@pytest.fixture
def earlier_run(tmp_path):
    """outputs/ holding an earlier run's files; yields (log_dir, check) where check() asserts
    that those files are unchanged."""
    run = tmp_path / "outputs" / "default" / "2020-01-01_00-00-00"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"status": "ok", "global_step": 7}))
    (run / "config.yaml").write_text("experiment_name: default\n")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"\x00weights" * 64)
    before = _digest_tree(run)

    def check():
        assert _digest_tree(run) == before

    return tmp_path / "outputs", check


def _fa_train(monkeypatch, capsys, log_dir, overrides):
    """Run the fa-train entry point in-process; returns (exit status, stderr lines)."""
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["fa-train", f"paths.log_dir={log_dir}",
                                      f"paths.cache_dir={log_dir.parent / 'cache'}",
                                      *CPU, *TINY, *overrides])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main()
    GlobalHydra.instance().clear()
    return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CONFIG_CASES],
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_value_refused_in_one_line(monkeypatch, capsys, earlier_run, overrides, expected):
    log_dir, unchanged = earlier_run
    code, err = _fa_train(monkeypatch, capsys, log_dir, overrides)
    assert_one_line_error(code, err, expected)
    unchanged()


@pytest.mark.parametrize("name,content,source,expected", [c[1:] for c in DATA_FILE_CASES],
                         ids=[c[0] for c in DATA_FILE_CASES])
def test_data_file_refused_in_one_line(monkeypatch, capsys, earlier_run, tmp_path, name, content,
                                       source, expected):
    log_dir, unchanged = earlier_run
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code, err = _fa_train(monkeypatch, capsys, log_dir, [
        "data=lm_files", f"data.source={source}", f"data.data_files={path}", "data.num_proc=1",
        "data.num_workers=0"])
    line = expected.format(path=path, parser_message="\0")
    if "\0" in line:  # the JSON parser's own words vary between versions
        head, tail = line.split("\0")
        assert err[-1].startswith(f"fa-train: error: {head}") and err[-1].endswith(tail)
        line = err[-1][len("fa-train: error: "):]
    assert_one_line_error(code, err, line)
    unchanged()


def test_missing_optional_logger_package_names_the_extra(monkeypatch, capsys, earlier_run):
    log_dir, unchanged = earlier_run
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    code, err = _fa_train(monkeypatch, capsys, log_dir, ["logger=wandb"])
    assert_one_line_error(code, err, "logger=wandb needs the wandb package: "
                                     "pip install 'fa-train[wandb]'")
    unchanged()


def test_full_error_mode_keeps_the_traceback(monkeypatch, capsys, earlier_run):
    log_dir, _ = earlier_run
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["fa-train", f"paths.log_dir={log_dir}", *CPU, *TINY,
                                      "model.n_layer=0"])
    with pytest.raises(Exception) as info:
        main()
    GlobalHydra.instance().clear()
    assert "model.n_layer=0" in str(info.value) or "model.n_layer=0" in str(info.value.__cause__)


def test_console_script_prints_one_line_and_debug_flag_the_traceback(tmp_path):
    """The real process: one stderr line and status 2; with --debug, the traceback."""
    base = [sys.executable, "-m", "fa_train.train", f"paths.log_dir={tmp_path}",
            "trainer.max_steps=-3"]
    plain = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2
    assert plain.stderr.strip().splitlines() == [
        "fa-train: error: trainer.max_steps=-3 is invalid: expected an integer >= 1"]
    debug = subprocess.run(base + ["--debug"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    assert "UserError: trainer.max_steps=-3" in debug.stderr


FA_DATA_CASES = [
    ("pathfinder-n-zero", ["pathfinder", "--n", "0"], "--n=0 is invalid: expected an integer >= 1"),
    ("pathfinder-n-negative", ["pathfinder", "--n", "-5"],
     "--n=-5 is invalid: expected an integer >= 1"),
    ("listops-n-train-zero", ["listops", "--n-train", "0"],
     "--n-train=0 is invalid: expected an integer >= 1"),
    ("listops-workers-zero", ["listops", "--workers", "0"],
     "--workers=0 is invalid: expected an integer >= 1"),
    ("listops-seed-negative", ["listops", "--seed", "-1"],
     "--seed=-1 is invalid: expected an integer >= 0"),
]


@pytest.mark.parametrize("argv,expected", [c[1:] for c in FA_DATA_CASES],
                         ids=[c[0] for c in FA_DATA_CASES])
def test_fa_data_refuses_before_writing(tmp_path, capsys, argv, expected):
    from fa_train.data.cli import main as fa_data

    out = tmp_path / "lra"
    assert fa_data([*argv, "--out", str(out)]) == 1
    assert capsys.readouterr().out.strip() == f"fa-data {argv[0]}: {expected}"
    assert not out.exists()


def _qkv(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


KERNEL_CASES = [
    ("q-ndim", lambda k: k.flash_attn_func(_qkv(2, 8, 2), _qkv(2, 8, 2, 16), _qkv(2, 8, 2, 16)),
     ValueError, "q must have 4 dims (batch, seqlen, heads, head_dim), got shape (2, 8, 2)"),
    ("dtype-unsupported", lambda k: k.flash_attn_func(_qkv(1, 8, 2, 16),
                                                      _qkv(1, 8, 2, 16, dtype=torch.float64),
                                                      _qkv(1, 8, 2, 16)),
     TypeError, "k has dtype torch.float64; supported: float16, bfloat16, float32"),
    ("dtype-mix", lambda k: k.flash_attn_func(_qkv(1, 8, 2, 16), _qkv(1, 8, 2, 16, dtype=torch.float16),
                                              _qkv(1, 8, 2, 16)),
     TypeError, "q, k, v must share a dtype"),
    ("head_dim-too-large", lambda k: k.flash_attn_func(*[_qkv(1, 8, 1, 1024)] * 3),
     ValueError, "head_dim 1024 is not supported"),
    ("heads-not-multiple", lambda k: k.flash_attn_func(_qkv(1, 8, 3, 16), _qkv(1, 8, 2, 16),
                                                       _qkv(1, 8, 2, 16)),
     ValueError, "q heads (3) must be a multiple of k/v heads (2)"),
    ("dropout-one", lambda k: k.flash_attn_func(*[_qkv(1, 8, 2, 16)] * 3, dropout_p=1.0),
     ValueError, "dropout_p must be in [0, 1), got 1.0"),
    ("padding-mask-shape", lambda k: k.flash_attn_func(*[_qkv(1, 8, 2, 16)] * 3,
                                                       key_padding_mask=torch.ones(1, 5, dtype=torch.bool)),
     ValueError, "key_padding_mask must have shape (batch, seqlen_k) = (1, 8), got (1, 5)"),
    ("cu_seqlens-total", lambda k: k.flash_attn_varlen_func(
        *[_qkv(8, 2, 16)] * 3, torch.tensor([0, 5], dtype=torch.int32),
        torch.tensor([0, 8], dtype=torch.int32), 8, 8),
     ValueError, "cu_seqlens_q[-1] = 5 must equal the number of packed tokens (8)"),
    ("cu_seqlens-decreasing", lambda k: k.flash_attn_varlen_func(
        *[_qkv(8, 2, 16)] * 3, torch.tensor([0, 6, 4, 8], dtype=torch.int32),
        torch.tensor([0, 4, 6, 8], dtype=torch.int32), 8, 8),
     ValueError, "cu_seqlens_q must start at 0 and never decrease, got [0, 6, 4, 8]"),
    ("max_seqlen-short", lambda k: k.flash_attn_varlen_qkvpacked_func(
        _qkv(8, 3, 2, 16), torch.tensor([0, 2, 8], dtype=torch.int32), 4),
     ValueError, "max_seqlen = 4 is below the longest sequence of cu_seqlens (6)"),
    ("cu_seqlens-dtype", lambda k: k.flash_attn_varlen_func(
        *[_qkv(8, 2, 16)] * 3, torch.tensor([0, 8]), torch.tensor([0, 8]), 8, 8),
     TypeError, "cu_seqlens_q must be int32, got torch.int64"),
    ("dropout-mask-p", lambda k: k.dropout_mask(1, 1, 8, 8, -0.1, seed=0, device="cpu"),
     ValueError, "dropout_p must be in [0, 1), got -0.1"),
    ("dropout-string", lambda k: k.flash_attn_func(*[_qkv(1, 8, 2, 16)] * 3, dropout_p="0.1"),
     ValueError, "dropout_p must be in [0, 1), got '0.1'"),
    ("softmax_scale-nan", lambda k: k.flash_attn_func(*[_qkv(1, 8, 2, 16)] * 3,
                                                      softmax_scale=float("nan")),
     ValueError, "softmax_scale must be a finite number, got nan"),
    ("padding-mask-float", lambda k: k.flash_attn_func(*[_qkv(1, 8, 2, 16)] * 3,
                                                       key_padding_mask=torch.zeros(1, 8)),
     TypeError, "key_padding_mask must be a bool tensor (True = keep), got torch.float32"),
]


@pytest.mark.parametrize("call,exc,message", [c[1:] for c in KERNEL_CASES],
                         ids=[c[0] for c in KERNEL_CASES])
def test_kernels_api_refuses_in_one_line(call, exc, message):
    import kernels

    with pytest.raises(exc) as info:
        call(kernels)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("check,args,message", [
    (check_int, ("k", True), "k=True is invalid: expected an integer >= 1"),
    (check_int, ("k", 2.0), "k=2.0 is invalid: expected an integer >= 1"),
    (check_int, ("k", 9, 1, 8), "k=9 is invalid: expected an integer in [1, 8]"),
    (check_float, ("k", "x", 0.0), "k='x' is invalid: expected a number in [0, inf]"),
    (check_float, ("k", float("nan"), 0.0), "k=nan is invalid: expected a number in [0, inf]"),
    (check_bool, ("k", "maybe"), "k='maybe' is invalid: expected true or false"),
    (check_bool, ("k", 1), "k=1 is invalid: expected true or false"),
    (check_run_config, (OmegaConf.create({"run_test": "no"}),), "run_test='no' is invalid: expected true or false"),
], ids=["bool", "float-for-int", "above-high", "string-for-float", "nan", "string-for-bool",
        "int-for-bool", "run_test"])
def test_range_checks_reject_values_of_the_wrong_kind(check, args, message):
    with pytest.raises(UserError, match=None) as info:
        check(*args)
    assert str(info.value) == message


@pytest.mark.parametrize("build,message", [
    (lambda: __import__("fa_train.models", fromlist=["GPT"]).GPT(
        n_layer=1, n_head=2, d_model=32, vocab_size=64, document_mask="yes"),
     "model.document_mask='yes' is invalid: expected true or false"),
    (lambda: __import__("fa_train.models", fromlist=["BertForPreTraining"]).BertForPreTraining(
        n_layer=1, n_head=2, d_model=32, vocab_size=64, nsp="no"),
     "model.nsp='no' is invalid: expected true or false"),
    (lambda: __import__("fa_train.models", fromlist=["LRAClassifier"]).LRAClassifier(
        n_layer=1, n_head=2, d_model=32, vocab_size=64, mask_pad_tokens=1),
     "model.mask_pad_tokens=1 is invalid: expected true or false"),
], ids=["gpt", "bert", "lra-classifier"])
def test_model_flags_must_be_true_or_false(build, message):
    with pytest.raises(UserError) as info:
        build()
    assert str(info.value) == message


def test_a_constructors_own_error_is_named_by_its_config_node():
    """Hydra wraps what a constructor raises ("Error in call to target ... full_key: data"): the
    line names the node and says the constructor's message once."""
    from hydra.errors import InstantiationException

    from fa_train.errors import user_message
    try:
        try:
            raise ValueError("chunk must be positive")
        except ValueError as cause:
            raise InstantiationException("Error in call to target 'x.DataModule':\n"
                                         "ValueError('chunk must be positive')\n"
                                         "full_key: data") from cause
    except InstantiationException as wrapped:
        assert user_message(wrapped) == "data: chunk must be positive"
