"""Guess the number's rules: the prompts, reading a guess, the referee's answers, and the score.

The referee is Python, not a model: `referee` answers each guess, `score` turns
a game into its reward and metrics, and `guess_progress` measures how much of
what was still possible each guess ruled out (the per-turn credit; see
`workflow.py`). The baselines read a conversation back through these same
constants and functions, so a change of wording reaches them too.
"""

from __future__ import annotations

import re

SYSTEM = "You are playing a guessing game. Reply with one number only."
RULES = "I picked a whole number from {low} to {high}. Guess it. I will say if your guess is too high or too low."
_NUMBER = re.compile(r"-?\d+")


def parse_guess(text: str, low: int, high: int) -> int | None:
    """The first whole number in the reply, if it is in range."""
    for match in _NUMBER.finditer(text):
        value = int(match.group())
        if low <= value <= high:
            return value
    return None


def referee(guess: int | None, secret: int, low: int, high: int) -> str:
    if guess is None:
        return f"That is not a number from {low} to {high}. Reply with one number."
    if guess == secret:
        return "Correct!"
    if guess > secret:
        return f"{guess} is too high. My number is lower than {guess}."
    return f"{guess} is too low. My number is higher than {guess}."


def guess_progress(secret: int, guesses: list[int | None], low: int, high: int) -> list[float]:
    """For each guess, the expected share of the still-possible numbers it rules out (0 if it ignores the answers).

    With n numbers possible, a guess that leaves `below` of them under it and `above` over it leaves, for a
    uniformly drawn secret, (below**2 + above**2) / n of them in expectation.
    """
    progress = []
    for guess in guesses:
        if guess is None or not low <= guess <= high:
            progress.append(0.0)
        else:
            possible, below, above = high - low + 1, guess - low, high - guess
            progress.append(1.0 - (below**2 + above**2) / possible**2)
        if guess is not None:
            low, high = (low, min(high, guess - 1)) if guess > secret else (max(low, guess + 1), high)
    return progress


def score(
    secret: int, guesses: list[int | None], low: int, high: int, max_turns: int, invalid_penalty: float
) -> dict[str, float]:
    valid = [g for g in guesses if g is not None]
    solved = bool(valid) and valid[-1] == secret
    if solved:
        reward = 1.0 + 0.5 * (max_turns - len(guesses)) / max_turns
    elif valid:
        reward = 0.5 * (1 - abs(valid[-1] - secret) / (high - low))
    else:
        reward = 0.0
    invalid = len(guesses) - len(valid)
    return {
        "reward": reward - invalid_penalty * invalid,
        "success": float(solved),
        "turns": float(len(guesses)),
        "invalid_rate": invalid / len(guesses),
    }
