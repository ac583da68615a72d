"""Contextual choice: one word of the prompt (a code colour) decides which of four letters pays.

A bandit with context: the pairing of colours with letters is arbitrary, so the policy can only learn it from
reward, and only by answering each colour differently. Chance 0.25, optimum 1.0.
"""

from __future__ import annotations

from game_kit import ask, random_option, seeded_tasks

from sparring import WorkflowOutput

PAIRS = {"red": "C", "green": "A", "blue": "D", "yellow": "B"}
LETTERS = ["A", "B", "C", "D"]
METRIC = "workflow/success"
OPTIMUM = 1.0
BASELINES = {"random": random_option}


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: {"colour": rng.choice(sorted(PAIRS))})


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    prompt = ask(f"Code word: {task['colour']}. Which letter goes with it?", LETTERS)
    reply = await model([{"role": "user", "content": prompt}], choices=LETTERS)
    success = float(reply.content.strip() == PAIRS[task["colour"]])
    return WorkflowOutput(reward=success, metrics={"success": success})
