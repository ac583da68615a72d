"""Guess the number: the policy guesses, a Python referee answers "too high" / "too low".

The simplest multi-turn setting (a programmatic counterpart, no second LLM):
each task holds a secret integer; the agent has `max_turns` guesses and sees
the referee's answer after each. Every guess is a turn of one conversation,
so the whole game trains as one merged sequence.

Reward: 1 for finding the number, with a small bonus for finding it early;
otherwise partial credit for how close the last valid guess came. A reply
with no number in range is an invalid move: it costs `invalid_penalty` and
the referee says so. `workflow_args` can change `low`, `high`, `max_turns`.

Per-turn credit: each guess earns `progress_bonus` times its progress as its
turn reward (`WorkflowOutput.turn_rewards`): the expected share of the
numbers still possible (given the answers so far) that the guess rules out.
A guess that ignores the feedback rules out nothing and earns 0; one at the
end of the possible range earns little; the midpoint earns most. So the
guess that used the feedback is the one credited, and halving is preferred
to counting up. The bonus is training signal only: the reported `reward` is
the game's score above, the same for the policy and for the scripted
baselines. (Crediting agreement with the feedback alone taught SmolLM2 to
count 1, 2, 3, 4: see docs/results.md.)

    sparring train examples/guess_number.yaml
"""

from __future__ import annotations

import random
import re

from sparring import ChatModel, WorkflowOutput

from .templates import read_template

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
    progress = guess_progress(secret, guesses, low, high)
    metrics["consistent_rate"] = sum(share > 0 for share in progress) / len(progress)
    metrics["progress"] = sum(progress) / len(progress)
    bonus = float(args.get("progress_bonus", 0.5))
    return WorkflowOutput(reward=metrics.pop("reward"), metrics=metrics, response=guesses, turn_rewards=[bonus * share for share in progress])


def make_tasks(count: int, seed: int, low: int = 1, high: int = 16) -> list[dict]:
    """Tasks with secrets drawn from a seeded generator (train and eval use different seeds)."""
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "secret": rng.randint(low, high)} for i in range(count)]


# --- Baselines: scripted policies for the trainable slot (`baselines:` in a config; see ScriptedChatModel) ---
# They read the game from the messages the workflow sends, through this module's own RULES, referee and
# parse_guess, so they follow any change of wording.

_WORD = re.compile(r"[a-z]+")


def game_range(messages: list[dict]) -> tuple[int, int]:
    """(low, high) as the rules message of the conversation states them."""
    for message in messages:
        found = read_template(RULES, message.get("content") or "")
        if found is not None:
            return int(found["low"]), int(found["high"])
    raise ValueError("no message of the conversation states the rules (RULES); is this a guess-the-number game?")


def feedback_direction(answer: str, guess: int, low: int, high: int) -> str | None:
    """Where the referee's `answer` to `guess` points: 'higher' (the guess was too low), 'lower', or None.

    The referee's own replies for a guess just below and just above the secret are compared: the words that
    tell them apart ('low' / 'high', or 'higher' / 'lower') are looked for in `answer`.
    """
    too_low = set(_WORD.findall(referee(guess, guess + 1, low, high).lower()))
    too_high = set(_WORD.findall(referee(guess, guess - 1, low, high).lower()))
    said = set(_WORD.findall(answer.lower()))
    points_up, points_down = bool(said & (too_low - too_high)), bool(said & (too_high - too_low))
    if points_up != points_down:
        return "higher" if points_up else "lower"
    return None


def played_guesses(messages: list[dict], low: int, high: int) -> list[tuple[int | None, str]]:
    """Each earlier guess of the conversation (None when it named no number in range) with the referee's answer."""
    pairs = []
    for reply, answer in zip(messages, messages[1:]):
        if reply.get("role") == "assistant" and answer.get("role") == "user":
            pairs.append((parse_guess(reply.get("content") or "", low, high), answer.get("content") or ""))
    return pairs


def random_valid(messages: list[dict], rng: random.Random) -> str:
    """Baseline: a uniformly random number in range every turn (earlier answers ignored)."""
    low, high = game_range(messages)
    return str(rng.randint(low, high))


def binary_search(messages: list[dict], rng: random.Random) -> str:
    """Baseline: the midpoint of the numbers still consistent with the referee's answers (1..16 in 4 guesses: 15 of 16)."""
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
