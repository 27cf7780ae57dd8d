"""Text-level generation helpers: stop strings and streaming decoded tokens to a terminal."""
from __future__ import annotations

from typing import Callable

from fa_train.errors import UserError

INCOMPLETE = "\ufffd"  # what a byte-level tokenizer decodes a partial UTF-8 character to


class StopStrings:
    """Stop a row once its decoded text contains one of `strings`; `cut` drops it and what
    follows."""

    def __init__(self, decode: Callable[[list[int]], str], strings: list[str]):
        if any(not s for s in strings):
            raise UserError("stop is invalid: a stop string must not be empty")
        self.decode, self.strings = decode, list(strings)

    def __call__(self, tokens: list[int]) -> bool:
        text = self.decode(tokens)
        return any(s in text for s in self.strings)

    def cut(self, text: str) -> str:
        ends = [i for s in self.strings if (i := text.find(s)) >= 0]
        return text[:min(ends)] if ends else text

    def pending(self, text: str) -> int:
        """Characters at the end of `text` that may begin a stop string (held back while
        streaming)."""
        return max([n for s in self.strings for n in range(1, len(s)) if text.endswith(s[:n])],
                   default=0)


class Streamer:
    """``on_token`` callback of batch-1 generation: writes the new text as it is decoded, never
    a partial character or a possible start of a stop string."""

    def __init__(self, decode: Callable[[list[int]], str], write: Callable[[str], None],
                 stop: StopStrings | None = None):
        self.decode, self.write, self.stop = decode, write, stop
        self.shown = 0

    def __call__(self, row: int, tokens: list[int]) -> None:
        text = self.decode(tokens)
        if text.endswith(INCOMPLETE):
            return
        end = len(text)
        if self.stop is not None:
            text = self.stop.cut(text)
            end = len(text) if len(text) < end else end - self.stop.pending(text)
        if end > self.shown:
            self.write(text[self.shown:end])
            self.shown = end

    def finish(self, text: str) -> None:
        """Write what is left of the final `text`."""
        self.write(text[self.shown:])
        self.shown = len(text)
