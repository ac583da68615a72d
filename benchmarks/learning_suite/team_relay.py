"""Team relay with per-agent rewards: a navigator turns a colour into a gate, a courier turns the gate into a cargo.

Two trainable roles of one policy, each paid for its own leg: the navigator 1 for the gate that belongs to the
colour, the courier 1 for the cargo that belongs to the gate the navigator named (right or wrong). The team
succeeds when both legs are right. Both pairings are arbitrary. Chance 1/9 for the team, optimum 1.0.
"""

from __future__ import annotations

from game_kit import ask, random_option, seeded_tasks

from sparring import WorkflowOutput

GATES = {"red": "north", "green": "south", "blue": "east"}
CARGO = {"north": "salt", "south": "wool", "east": "iron"}
METRIC = "workflow/success"
OPTIMUM = 1.0
BASELINES = {"random": random_option}


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: {"colour": rng.choice(sorted(GATES))})


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    navigator, courier = model.as_agent("navigator", role="navigator"), model.as_agent("courier", role="courier")
    gates, cargo = sorted(CARGO), sorted(CARGO.values())
    route = ask(f"You are the navigator. The flag is {task['colour']}. Which gate?", gates)
    gate = (await navigator([{"role": "user", "content": route}], choices=gates)).content.strip()
    load = ask(f"You are the courier. The gate is {gate}. Which cargo?", cargo)
    carried = (await courier([{"role": "user", "content": load}], choices=cargo)).content.strip()
    legs = {"navigator": float(gate == GATES[task["colour"]]), "courier": float(carried == CARGO[gate])}
    success = legs["navigator"] * legs["courier"]
    return WorkflowOutput(
        reward=legs, metrics={"success": success, **{f"{agent}_right": value for agent, value in legs.items()}}
    )
