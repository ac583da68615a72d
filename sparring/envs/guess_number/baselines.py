"""Guess the number's baselines: scripted players for the trainable slot (`baselines:` in a config).

Each is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
`ScriptedChatModel`). They read the game from the messages the workflow sends,
through the rules' own RULES, referee and parse_guess, so they follow any
change of wording.
"""

from __future__ import annotations

import random
import re

from ..common import read_template
from . import rules

_WORD = re.compile(r"[a-z]+")


def game_range(messages: list[dict]) -> tuple[int, int]:
    """(low, high) as the rules message of the conversation states them."""
    for message in messages:
        found = read_template(rules.RULES, message.get("content") or "")
        if found is not None:
            return int(found["low"]), int(found["high"])
    raise ValueError("no message of the conversation states the rules (RULES); is this a guess-the-number game?")


def feedback_direction(answer: str, guess: int, low: int, high: int) -> str | None:
    """Where the referee's `answer` to `guess` points: 'higher' (the guess was too low), 'lower', or None.

    The referee's own replies for a guess just below and just above the secret are compared: the words that
    tell them apart ('low' / 'high', or 'higher' / 'lower') are looked for in `answer`.
    """
    too_low = set(_WORD.findall(rules.referee(guess, guess + 1, low, high).lower()))
    too_high = set(_WORD.findall(rules.referee(guess, guess - 1, low, high).lower()))
    said = set(_WORD.findall(answer.lower()))
    points_up, points_down = bool(said & (too_low - too_high)), bool(said & (too_high - too_low))
    if points_up != points_down:
        return "higher" if points_up else "lower"
    return None


def played_guesses(messages: list[dict], low: int, high: int) -> list[tuple[int | None, str]]:
    """Each earlier guess of the conversation (None when it named no number in range) with the referee's answer."""
    pairs = []
    for reply, answer in zip(messages, messages[1:], strict=False):
        if reply.get("role") == "assistant" and answer.get("role") == "user":
            pairs.append((rules.parse_guess(reply.get("content") or "", low, high), answer.get("content") or ""))
    return pairs


def random_valid(messages: list[dict], rng: random.Random) -> str:
    """Baseline: a uniformly random number in range every turn (earlier answers ignored)."""
    low, high = game_range(messages)
    return str(rng.randint(low, high))


def binary_search(messages: list[dict], rng: random.Random) -> str:
    """Baseline: the midpoint of the numbers still consistent with the referee's answers (1..16 in 4 guesses: 15 of
    16)."""
    low, high = game_range(messages)
    lo, hi = low, high
    for guess, answer in played_guesses(messages, low, high):
        direction = None if guess is None else feedback_direction(answer, guess, low, high)
        if direction == "higher":
            lo = max(lo, guess + 1)
        elif direction == "lower":
            hi = min(hi, guess - 1)
    if lo > hi:  # answers that contradict each other: search the whole range again
        lo, hi = low, high
    return str((lo + hi) // 2)
