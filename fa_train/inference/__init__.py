"""Inference from trained GPT models: KV-cache generation with greedy / temperature / top-k /
top-p sampling (`generate`; on CUDA its decode steps replay one CUDA graph), speculative greedy
decoding with a draft model's token tree (`speculative_generate`), and loading fa-train runs or
Hugging Face GPT-2 weights (fa_train.inference.loading.load_gpt). ``fa-generate``
(fa_train.generate) is the command line."""
from fa_train.inference.generation import Generation, Timing, generate
from fa_train.inference.sampling import Sampling
from fa_train.inference.speculative import speculative_generate

__all__ = ["Generation", "Sampling", "Timing", "generate", "speculative_generate"]
