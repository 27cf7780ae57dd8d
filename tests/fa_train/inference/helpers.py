"""GPTs of random weights for the inference tests, scaled so that greedy text varies."""
import torch

from fa_train.models import GPT


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
