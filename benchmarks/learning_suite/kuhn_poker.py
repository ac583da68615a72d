"""Kuhn poker as the first player, against the second player's equilibrium strategy (scripted).

Three cards (J < Q < K), one each, ante 1. The learner checks or bets; after a check the opponent may bet, and
the learner calls or folds. The opponent plays a Nash equilibrium: after a bet it calls with K, with Q one time in
three, folds J; after a check it bets K, bets J one time in three, checks Q. Against it the first player's best
value is the game's, -1/18 chip a hand (folding J to a bet, calling with K, betting K); a random player loses
more. The reward is the chips won. The whole decision hinges on one word of the prompt: the card.
"""

from __future__ import annotations

import random

from sparring import WorkflowOutput

from common import ask, options_in, seeded_tasks

CARDS = ["J", "Q", "K"]
NAMES = {"J": "Jack (the lowest)", "Q": "Queen (the middle)", "K": "King (the highest)"}
METRIC = "reward/mean"
OPTIMUM = -1 / 18
RULES = "Kuhn poker: three cards, Jack < Queen < King; each player antes 1 chip and gets one card."


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: dict(zip(("mine", "theirs"), rng.sample(CARDS, 2))))


def random_option(messages: list[dict], rng: random.Random) -> str:
    return rng.choice(options_in(messages))


def equilibrium(messages: list[dict], rng: random.Random) -> str:
    """The first player's equilibrium (bluff J a sixth of the time, bet K half the time, call with Q half the time)."""
    card = next(card for card in CARDS if f"Your card: {NAMES[card]}" in messages[0]["content"])
    if options_in(messages) == ["check", "bet"]:
        return "bet" if rng.random() < {"J": 1 / 6, "Q": 0.0, "K": 0.5}[card] else "check"
    return "call" if rng.random() < {"J": 0.0, "Q": 0.5, "K": 1.0}[card] else "fold"


BASELINES = {"random": random_option, "equilibrium": equilibrium}


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    rng = random.Random(task["seed"])
    mine, theirs = task["mine"], task["theirs"]
    win = 1.0 if CARDS.index(mine) > CARDS.index(theirs) else -1.0
    history = [{"role": "user", "content": ask(f"{RULES} Your card: {NAMES[mine]}. You act first.", ["check", "bet"])}]
    first = await model(history, choices=["check", "bet"])
    if first.content.strip() == "bet":
        calls = theirs == "K" or (theirs == "Q" and rng.random() < 1 / 3)
        chips = 2 * win if calls else 1.0
    elif theirs == "K" or (theirs == "J" and rng.random() < 1 / 3):
        history += [first.message, {"role": "user", "content": ask("Your opponent bets 1 chip.", ["call", "fold"])}]
        second = await model(history, choices=["call", "fold"])
        chips = 2 * win if second.content.strip() == "call" else -1.0
    else:
        chips = win
    return WorkflowOutput(reward=chips, metrics={"chips": chips})
