"""Convention: two trainable roles of one policy must invent a code, a speaker's signal for each hidden item.

The speaker sees the item and sends one of three signals; the listener sees only the signal and names the item.
Both are paid 1 when the listener is right, so neither can learn alone: each role's best reply depends on what
the other does now. Chance 1/3, optimum 1.0 (any one-to-one code).
"""

from __future__ import annotations

from game_kit import ask, random_option, seeded_tasks

from sparring import WorkflowOutput

ITEMS = ["apple", "ball", "cat"]
SIGNALS = ["1", "2", "3"]
METRIC = "workflow/success"
OPTIMUM = 1.0
BASELINES = {"random": random_option}


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: {"item": rng.choice(ITEMS)})


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    speaker, listener = model.as_agent("speaker", role="speaker"), model.as_agent("listener", role="listener")
    hint = ask(f"You are the speaker. The hidden item is {task['item']}. Send your partner a signal.", SIGNALS)
    signal = (await speaker([{"role": "user", "content": hint}], choices=SIGNALS)).content.strip()
    question = ask(f"You are the listener. Your partner's signal is {signal}. Which item is hidden?", ITEMS)
    guess = (await listener([{"role": "user", "content": question}], choices=ITEMS)).content.strip()
    success = float(guess == task["item"])
    return WorkflowOutput(reward=success, metrics={"success": success})
