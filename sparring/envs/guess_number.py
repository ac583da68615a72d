"""Guess the number: the policy guesses, a Python referee answers "too high" / "too low".

The simplest multi-turn setting (a programmatic counterpart, no second LLM):
each task holds a secret integer; the agent has `max_turns` guesses and sees
the referee's answer after each. Every guess is a turn of one conversation,
so the whole game trains as one merged sequence.

Reward: 1 for finding the number, with a small bonus for finding it early;
otherwise partial credit for how close the last valid guess came. A reply
with no number in range is an invalid move: it costs `invalid_penalty` and
the referee says so. `workflow_args` can change `low`, `high`, `max_turns`.

    sparring train examples/guess_number.yaml
"""

from __future__ import annotations

import random
import re

from sparring import ChatModel, WorkflowOutput

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
    return f"{guess} is too {'high' if guess > secret else 'low'}. Guess again."


def score(secret: int, guesses: list[int | None], low: int, high: int, max_turns: int, invalid_penalty: float) -> dict[str, float]:
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


async def guess_number(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = task.get("workflow_args", {})
    low, high = int(args.get("low", 1)), int(args.get("high", 16))
    max_turns = int(args.get("max_turns", 5))
    secret = int(task["secret"]) if "secret" in task else random.Random(task.get("seed", 0)).randint(low, high)
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": RULES.format(low=low, high=high)}]
    guesses: list[int | None] = []
    while len(guesses) < max_turns:
        reply = await model(history)
        guess = parse_guess(reply.content, low, high)
        guesses.append(guess)
        if guess == secret:
            break
        history += [reply.message, {"role": "user", "content": referee(guess, secret, low, high)}]
    metrics = score(secret, guesses, low, high, max_turns, float(args.get("invalid_penalty", 0.1)))
    return WorkflowOutput(reward=metrics.pop("reward"), metrics=metrics, response=guesses)


def make_tasks(count: int, seed: int, low: int = 1, high: int = 16) -> list[dict]:
    """Tasks with secrets drawn from a seeded generator (train and eval use different seeds)."""
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "secret": rng.randint(low, high)} for i in range(count)]
