"""What the suite's games share: every prompt ends with "Answer with one of: a, b, c.", and a baseline that reads it.

A scripted baseline gets the conversation only (`policy(messages, rng) -> reply`), so it reads the options the
game offers from the last message, as a person would.
"""

from __future__ import annotations

import random

OPTIONS_MARK = "Answer with one of: "


def ask(text: str, options: list[str]) -> str:
    """A prompt that ends by listing the replies the game accepts."""
    return f"{text} {OPTIONS_MARK}{', '.join(options)}."


def options_in(messages: list[dict]) -> list[str]:
    """The options the last message offers."""
    text = messages[-1]["content"]
    return text[text.rindex(OPTIONS_MARK) + len(OPTIONS_MARK) :].rstrip(".").split(", ")


def random_option(messages: list[dict], rng: random.Random) -> str:
    """A player who picks any offered reply at random."""
    return rng.choice(options_in(messages))


def seeded_tasks(count: int, seed: int, make) -> list[dict]:
    """`count` tasks, each `make(rng)` plus the seed its episode draws from."""
    rng = random.Random(seed)
    return [{**make(rng), "seed": rng.randrange(2**31)} for _ in range(count)]
