"""Tiny GPTs for the inference tests (random weights, scaled so that greedy text varies)."""
import torch

from fa_train.models import GPT


def tiny_gpt(seed=0, n_layer=2, vocab_size=97, max_seq_len=64, attention="sdpa"):
    torch.manual_seed(seed)
    model = GPT(vocab_size=vocab_size, max_seq_len=max_seq_len, n_layer=n_layer, n_head=4,
                d_model=32, dropout=0.0, attention=attention)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model.eval()


def recompute_greedy(model, prompt, n):
    """Greedy continuation without a cache: the whole sequence through forward at every step."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(prompt):]
