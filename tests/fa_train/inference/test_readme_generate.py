"""The README's flow on the CPU: the default job trains a checkpoint, and the README's
fa-generate command samples from it and reports tokens/s."""
import shlex
import subprocess

from fa_train.generate import main
from fa_train.train import train
from tests.fa_train.test_train import check_outputs, make_cfg
from tests.test_readme import commands

RUN_PLACEHOLDER = "outputs/default/<run id>"


def bash_argv(line: str) -> list[str]:
    """The arguments bash passes for the command `line` (its quoting and escapes)."""
    done = subprocess.run(["bash", "-c", f'set -- {line}; printf "%s\\0" "$@"'],
                          capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def test_readme_generate_command_samples_from_the_default_job(tmp_path, capsys):
    run = check_outputs(train(make_cfg(tmp_path, "default", steps=2)), tmp_path)
    line = next(c for c in commands() if c.startswith(f"fa-generate {RUN_PLACEHOLDER} "))
    argv = bash_argv(line.replace(RUN_PLACEHOLDER, shlex.quote(run["output_dir"])))[1:]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    prompt = argv[argv.index("--prompt") + 1]
    assert out.out.startswith(prompt) and out.out[len(prompt):].strip()
    stop = argv[argv.index("--stop") + 1]
    assert stop == "\n\n" and stop not in out.out[len(prompt):].rstrip("\n")   # a real blank line
    assert "[fa-generate] prefill:" in out.err and "tokens/s); decode:" in out.err
