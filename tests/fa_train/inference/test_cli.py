"""fa-generate end to end on a tiny fa-train run folder written here."""
import pytest
import torch
import yaml

from fa_train.generate import main
from fa_train.inference import Sampling, generate
from tests.fa_train.inference.helpers import write_tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_tiny_run(tmp_path_factory.mktemp("gen"))


def cli(capsys, checkpoint, *args):
    """fa-generate on the CPU (the tests compare with float32 CPU generation)."""
    code = main([str(a) for a in (checkpoint, "--device", "cpu", *args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_greedy_batch_matches_generate(run, capsys):
    folder, model, tok = run
    prompts = ["the model", "def"]
    code, out, err = cli(capsys, folder, "--prompt", prompts[0], "--prompt", prompts[1],
                         "--greedy", "--max-new-tokens", 8)
    assert code == 0
    ids = [tok.encode(p).ids for p in prompts]
    expected = generate(model, ids, 8, Sampling(temperature=0.0), eos_id=0).tokens
    for i, (p, t) in enumerate(zip(prompts, expected)):
        assert f"--- sample {i}\n{p}{tok.decode(t)}" in out
    assert "[fa-generate] prefill:" in err and "tokens/s); decode:" in err


def test_streamed_sample_and_speculative_output_agree(run, capsys, tmp_path):
    folder, model, tok = run
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("return the\n\n")
    ckpt = folder / "checkpoints" / "last.ckpt"
    _, streamed, _ = cli(capsys, ckpt, "--prompt-file", prompt_file, "--greedy",
                         "--max-new-tokens", 10)
    code, spec, err = cli(capsys, folder, "--prompt", "return the", "--max-new-tokens", 10,
                          "--draft", folder, "--spec-tree", "2,1")
    assert code == 0 and streamed == spec and streamed.startswith("return the")
    assert "acceptance rate 1.00" in err
    _, seeded, _ = cli(capsys, folder, "--prompt", "the", "--seed", 4, "--top-k", 5)
    assert seeded == cli(capsys, folder, "--prompt", "the", "--seed", 4, "--top-k", 5)[1]


def test_stop_text_ends_the_output(run, capsys):
    folder, _, _ = run
    _, free, _ = cli(capsys, folder, "--prompt", "the", "--greedy", "--max-new-tokens", 12,
                     "--no-stream")
    text = free.split("\n", 1)[1].rstrip("\n")
    stop = text[6:9]
    _, cut, _ = cli(capsys, folder, "--prompt", "the", "--greedy", "--max-new-tokens", 12,
                    "--stop", stop)
    assert cut == text[:text.index(stop)] + "\n"


@pytest.mark.parametrize("args,message", [
    (["--temperature", "-2"], "temperature=-2.0 is invalid: expected a number in [0, inf]"),
    (["--top-p", "0"], "top_p=0.0 is invalid: expected a number in (0, 1]"),
    (["--top-k", "0"], "top_k=0 is invalid: expected an integer >= 1"),
    (["--prompt", "the " * 60], "prompt is invalid: 61 tokens is longer than the model's context "
                                "(model.max_seq_len=48)"),
    (["--max-new-tokens", "100"], "max_new_tokens=100 is invalid: expected at most 47"),
    (["--spec-tree", "2,x", "--draft", "."], "spec_tree='2,x' is invalid"),
    (["--draft", ".", "--temperature", "0.7"], "draft is invalid with --temperature above 0"),
    (["--stop", ""], "stop is invalid: a stop string must not be empty"),
    (["--max-new-tokens", "0"], "max_new_tokens=0 is invalid: expected an integer >= 1"),
    (["--threads", "0"], "threads=0 is invalid: expected an integer >= 1"),
    (["--cuda-graph"], "cuda_graph=True is invalid: CUDA graphs need a model on a CUDA device, "
                       "this one is on cpu"),
    (["--draft", ".", "--cuda-graph"], "cuda_graph is invalid with --draft: speculative "
                                       "decoding runs eagerly"),
    (["--attention", "fast"], "attention='fast' is invalid: expected one of "),
    (["--tokenizer", "none.json"], "tokenizer none.json does not exist"),
    (["--prompt-file", "none.txt"], "prompt_file none.txt does not exist"),
    pytest.param(["--device", "cuda:0"], "device=cuda is invalid: no CUDA GPU is available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")),
])
def test_bad_options_give_one_line(run, capsys, args, message):
    assert refusal(capsys, run[0], *args).startswith(f"fa-generate: error: {message}")


def test_flash_on_a_cpu_without_the_interpreter_is_refused_first(run, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    err = refusal(capsys, run[0], "--prompt", "the model", "--attention", "flash")
    assert err.startswith("fa-generate: error: attention='flash' is invalid on cpu: its Triton "
                          "kernels need a CUDA GPU (or TRITON_INTERPRET=1, slow); on the CPU use "
                          "sdpa, standard or auto"), err


def refusal(capsys, checkpoint, *args):
    """The one-line error of fa-generate on the CPU (exit status 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as exit_:
        main([str(checkpoint), "--device", "cpu", *args])
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == "" and out.err.count("\n") == 1, out
    return out.err


def test_checkpoint_of_another_model_is_refused(run, capsys, tmp_path):
    folder, _, _ = run
    other = tmp_path / "bert-run"
    (other / "checkpoints").mkdir(parents=True)
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    cfg["model"]["_target_"] = "fa_train.models.BertForPreTraining"
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    ckpt = (folder / "checkpoints" / "last.ckpt").read_bytes()
    (other / "checkpoints" / "last.ckpt").write_bytes(ckpt)
    for args in ([other], [folder, "--draft", other], [tmp_path / "missing"]):
        with pytest.raises(SystemExit):
            main([str(a) for a in args])
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fa-generate: error: "), err
        assert ("holds a fa_train.models.BertForPreTraining model; fa-generate needs a GPT"
                in err) or "checkpoint: no checkpoint at" in err


def test_checkpoint_whose_weights_do_not_fit_its_config_is_refused(run, capsys, tmp_path):
    folder, _, _ = run
    other = tmp_path / "wider-run"
    (other / "checkpoints").mkdir(parents=True)
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    cfg["model"]["n_layer"] += 1                          # a config the weights were not trained with
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    (other / "checkpoints" / "last.ckpt").write_bytes((folder / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(SystemExit):
        main([str(other), "--device", "cpu"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"fa-generate: error: checkpoint {other / 'checkpoints' / 'last.ckpt'} does "
                          "not fit this model: the checkpoint lacks "), err


@pytest.mark.gpu
def test_cuda_defaults_run_flash_in_bf16(run, capsys):
    """On a GPU the defaults pick CUDA, bfloat16, flash (prefill and cache kernels) and CUDA-graph
    decode steps."""
    folder, _, _ = run
    argv = [str(folder), "--prompt", "the model", "--greedy", "--max-new-tokens", "12"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.out.startswith("the model") and "tokens/s); decode:" in out.err
    assert main(argv + ["--no-cuda-graph"]) == 0  # eager decode steps
    assert capsys.readouterr().out.startswith("the model")
    assert main(argv + ["--draft", str(folder), "--no-stream"]) == 0
    spec = capsys.readouterr()
    assert "acceptance rate" in spec.err and "--- sample 0\nthe model" in spec.out
