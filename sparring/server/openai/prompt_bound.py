"""`PromptBound`: a chat prompt too long for the model is refused before it is tokenized whole.

Tokenizing a prompt costs time and memory in proportion to its length (a
10 MB prompt took seconds and gigabytes), yet all that must be known is
whether it fits the room the model's context leaves. Two cheap bounds answer
that first, from the messages' text alone:

- characters: no token covers more than `max_token_chars` characters (the
  longest entry of the vocabulary), so text longer than room x that cannot
  fit, and is refused without tokenizing anything;
- a count that stops at the room: the text is tokenized a piece at a time
  (`PIECE_CHARS`, cut at a space so the pieces tokenize as the whole does),
  and the count stops as soon as it passes the room, allowing
  `PIECE_SLACK_TOKENS` per cut for a cut that still splits a token.

A prompt that passes both is rendered and counted exactly, at a cost now
bounded by the room.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..limits import LimitExceeded

PIECE_CHARS = 4096
"""How much text is tokenized at a time while counting."""
PIECE_SLACK_TOKENS = 2
"""Tokens a cut between two pieces may add to the count (a cut that splits what the whole text would merge)."""


class PromptBound:
    """Lower bounds on the tokens a chat prompt takes under one tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.max_token_chars = max(len(token) for token in tokenizer.get_vocab())
        """Most characters one token covers (its vocabulary entry is at least as long: one character per byte)."""

    def check(self, texts: list[str], room: int, context: int) -> None:
        """Raise LimitExceeded('messages') when `texts` surely take more than `room` tokens of the `context`."""
        characters = sum(len(text) for text in texts)
        if characters > room * self.max_token_chars:
            raise LimitExceeded(
                "messages",
                f"the messages hold {characters} characters, more than {room} tokens (the room max_tokens "
                f"leaves in the model's context length of {context} tokens) can cover",
            )
        counted = cuts = 0
        for text in texts:
            for piece in _pieces(text):
                counted += len(self.tokenizer.encode(piece, add_special_tokens=False))
                if counted > room + PIECE_SLACK_TOKENS * cuts:
                    raise LimitExceeded(
                        "messages",
                        f"the messages take more than {room} tokens, the room max_tokens leaves in the "
                        f"model's context length of {context} tokens",
                    )
                cuts += 1


def _pieces(text: str) -> Iterator[str]:
    """`text` in pieces of about PIECE_CHARS, each cut before a space where there is one."""
    start = 0
    while start < len(text):
        end = start + PIECE_CHARS
        if end < len(text):
            space = text.rfind(" ", start + PIECE_CHARS // 2, end)
            end = space if space > start else end
        yield text[start:end]
        start = end
