"""Bargaining over 10 coins with a scripted buyer whose demand one word gives away, over up to three rounds.

The learner says how many coins it keeps; the buyer accepts when what is left meets its demand (2 to 5 coins,
told by its mood: modest, easygoing, firm, stubborn). A refused offer shrinks the pot by 2 and the learner offers
again. The learner is paid its coins / 10 on a deal, 0 without one. Best: keep 10 - demand at once (0.65 on
average); an even split always closes at once (0.5).
"""

from __future__ import annotations

import random

from game_kit import ask, options_in, random_option, seeded_tasks

from sparring import WorkflowOutput

DEMANDS = {"modest": 2, "easygoing": 3, "firm": 4, "stubborn": 5}
POTS = [10, 8, 6]
METRIC = "reward/mean"
OPTIMUM = 0.65


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: {"mood": rng.choice(sorted(DEMANDS))})


def even_split(messages: list[dict], rng: random.Random) -> str:
    """Keep half the pot (rounded down)."""
    return str(max(int(option) for option in options_in(messages)) // 2 + 1)


BASELINES = {"random": random_option, "even_split": even_split}


def _offer(pot: int) -> list[str]:
    return [str(keep) for keep in range(1, pot)]


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    demand = DEMANDS[task["mood"]]
    opening = f"You split a pot of {POTS[0]} coins with a {task['mood']} buyer. How many coins do you keep?"
    history = [{"role": "user", "content": ask(opening, _offer(POTS[0]))}]
    for round_index, pot in enumerate(POTS):
        reply = await model(history, choices=_offer(pot))
        keep = int(reply.content.strip())
        if pot - keep >= demand:
            return WorkflowOutput(reward=keep / 10, metrics={"deal": 1.0, "rounds": round_index + 1.0})
        if round_index + 1 < len(POTS):
            refusal = (
                f"The {task['mood']} buyer refuses; the pot shrinks to {POTS[round_index + 1]}. How many do you keep?"
            )
            history += [reply.message, {"role": "user", "content": ask(refusal, _offer(POTS[round_index + 1]))}]
    return WorkflowOutput(reward=0.0, metrics={"deal": 0.0, "rounds": float(len(POTS))})
