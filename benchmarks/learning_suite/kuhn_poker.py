"""Kuhn poker as the first player, against the second player's equilibrium strategy (scripted).

Three cards (J < Q < K), one each, ante 1. The learner checks or bets; after a check the opponent may bet, and
the learner calls or folds. The opponent plays a Nash equilibrium: after a bet it calls with K, with Q one time in
three, folds J; after a check it bets K, bets J one time in three, checks Q. Against it the first player's best
value is the game's, -1/18 chip a hand; a random player loses more. The decision hinges on one word of the
prompt: the card.

The reward is the chips the learner's choices win on its deal, in expectation over the opponent's coin flips
(integrated out exactly). The table reports a lower-noise estimate of the same value: the edge over the equilibrium
player holding the same card, in expectation over the opponent's card too (the learner's replies depend on its own
card only, so each hand is scored against both cards the opponent may hold; the learner is therefore asked for its
reply to a bet whenever it checks). The optimum is 0: no first player does better than -1/18 against the
equilibrium, and every equilibrium move is worth the same there, so a policy at the optimum scores 0 on every hand.
"""

from __future__ import annotations

import random

from game_kit import ask, options_in, random_option, seeded_tasks

from sparring import WorkflowOutput

CARDS = ["J", "Q", "K"]
NAMES = {"J": "Jack (the lowest)", "Q": "Queen (the middle)", "K": "King (the highest)"}
METRIC = "workflow/edge"
OPTIMUM = 0.0  # the equilibrium value, -1/18 chip a hand, is the most the first player can win against it
RULES = "Kuhn poker: three cards, Jack < Queen < King; each player antes 1 chip and gets one card."


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: dict(zip(("mine", "theirs"), rng.sample(CARDS, 2), strict=True)))


EQUILIBRIUM_BET = {"J": 1 / 6, "Q": 0.0, "K": 0.5}
"""The first player's equilibrium chance of betting, by its card (one of a family; every member is worth -1/18)."""
EQUILIBRIUM_CALL = {"J": 0.0, "Q": 0.5, "K": 1.0}
"""Its chance of calling a bet after checking, by its card."""
CALLS = {"K": 1.0, "Q": 1 / 3, "J": 0.0}
"""The opponent's chance of calling a bet, by its card."""
BETS = {"K": 1.0, "Q": 0.0, "J": 1 / 3}
"""The opponent's chance of betting after a check, by its card."""


def deal_chips(mine: str, theirs: str, bet: float, call: float) -> float:
    """The first player's chips on one deal in expectation over the opponent's coin flips, betting with chance `bet`
    and calling a bet after a check with chance `call`."""
    win = 1.0 if CARDS.index(mine) > CARDS.index(theirs) else -1.0
    after_bet = CALLS[theirs] * 2 * win + (1 - CALLS[theirs])
    after_check = BETS[theirs] * (call * 2 * win - (1 - call)) + (1 - BETS[theirs]) * win
    return bet * after_bet + (1 - bet) * after_check


def card_chips(mine: str, bet: float, call: float) -> float:
    """The same holding `mine`, in expectation over the opponent's card as well."""
    others = [card for card in CARDS if card != mine]
    return sum(deal_chips(mine, theirs, bet, call) for theirs in others) / len(others)


def equilibrium(messages: list[dict], rng: random.Random) -> str:
    """The first player's equilibrium strategy."""
    card = next(card for card in CARDS if f"Your card: {NAMES[card]}" in messages[0]["content"])
    if options_in(messages) == ["check", "bet"]:
        return "bet" if rng.random() < EQUILIBRIUM_BET[card] else "check"
    return "call" if rng.random() < EQUILIBRIUM_CALL[card] else "fold"


BASELINES = {"random": random_option, "equilibrium": equilibrium}


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    mine, theirs = task["mine"], task["theirs"]
    history = [{"role": "user", "content": ask(f"{RULES} Your card: {NAMES[mine]}. You act first.", ["check", "bet"])}]
    first = await model(history, choices=["check", "bet"])
    bet = float(first.content.strip() == "bet")
    call = 0.0
    if not bet:
        history += [first.message, {"role": "user", "content": ask("Your opponent bets 1 chip.", ["call", "fold"])}]
        call = float((await model(history, choices=["call", "fold"])).content.strip() == "call")
    chips = deal_chips(mine, theirs, bet, call)
    # The edge over the equilibrium player holding the same card: card luck cancels, so it separates with fewer hands.
    edge = card_chips(mine, bet, call) - card_chips(mine, EQUILIBRIUM_BET[mine], EQUILIBRIUM_CALL[mine])
    return WorkflowOutput(reward=chips, metrics={"chips": chips, "edge": edge})
