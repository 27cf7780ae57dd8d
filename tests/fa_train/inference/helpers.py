"""GPTs of random weights for the inference tests, scaled so that greedy text varies, and a
tiny fa-train run folder that holds one."""
import torch
import yaml

from fa_train.data.lm import LMDataModule
from fa_train.data.tokenizer import train_bpe
from fa_train.models import GPT

TEXT = ["def generate(model, prompt):", "return the tokens of a prompt", "the model and its cache"]


def scaled_gpt(seed=0, scale=4.0, **config):
    """GPT(**config) in eval mode, its random initial weights multiplied by `scale`."""
    torch.manual_seed(seed)
    model = GPT(dropout=0.0, **config)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model.eval()


def tiny_gpt(seed=0, n_layer=2, vocab_size=97, max_seq_len=64, attention="sdpa"):
    return scaled_gpt(seed, vocab_size=vocab_size, max_seq_len=max_seq_len, n_layer=n_layer,
                      n_head=4, d_model=32, attention=attention)


def recompute_greedy(model, prompt, n):
    """Greedy continuation without a cache: the whole sequence through forward at every step."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(prompt):]


def write_tiny_run(root, seed=0):
    """root/outputs/default/run1/{config.yaml, checkpoints/last.ckpt} of a tiny_gpt, and the
    tokenizer where the run's datamodule keeps it; returns (run folder, model, tokenizer)."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(TEXT * 20))
    data = dict(_target_="fa_train.data.lm.LMDataModule", source="text",
                data_files=str(corpus), tokenizer="bpe", vocab_size=300, seq_len=16,
                batch_size=2, cache_dir=str(root / "cache"))
    model = tiny_gpt(seed, vocab_size=300, max_seq_len=48)
    model_cfg = dict(_target_="fa_train.models.GPT", vocab_size=300, max_seq_len=48, n_layer=2,
                     n_head=4, d_model=32, dropout=0.0, attention={"impl": "flash"})
    folder = root / "outputs" / "default" / "run1"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": model_cfg, "data": data}))
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "global_step": 3}, folder / "checkpoints" / "last.ckpt")
    dm = LMDataModule(**{k: v for k, v in data.items() if k != "_target_"})
    dm.data_dir.mkdir(parents=True, exist_ok=True)
    tok = train_bpe(TEXT * 20, 300, dm.data_dir / "tokenizer.json")
    return folder, model, tok
