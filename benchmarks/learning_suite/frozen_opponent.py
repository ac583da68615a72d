"""Rock, paper, scissors against a frozen LLM: the untrained SmolLM2 plays the other side, with its own bias.

The opponent samples its move from the base model; the learner sees the same question and is paid 1 for a win,
0.5 for a tie, 0 for a loss. Against an opponent that favours one move, the best reply is the move that beats it:
the learner has to find the frozen model's habit from rewards. A uniform player scores 0.5.
"""

from __future__ import annotations

from game_kit import ask, random_option, seeded_tasks

from sparring import WorkflowOutput

MOVES = ["rock", "paper", "scissors"]
BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}
QUESTION = ask("We play one round of rock, paper, scissors. Your move?", MOVES)
METRIC = "reward/mean"
OPTIMUM = None  # the best reply to the frozen model's mix, which the game does not know in advance
BASELINES = {"random": random_option}
AUXILIARY = {"opponent": {"model_path": "smollm2-135m-instruct"}}


def tasks(count: int, seed: int) -> list[dict]:
    return seeded_tasks(count, seed, lambda rng: {})


async def workflow(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    opponent = auxiliary_models["opponent"].as_agent("opponent", role="opponent")
    theirs = (await opponent([{"role": "user", "content": QUESTION}], choices=MOVES)).content.strip()
    mine = (await model([{"role": "user", "content": QUESTION}], choices=MOVES)).content.strip()
    reward = 1.0 if BEATS[mine] == theirs else 0.5 if mine == theirs else 0.0
    return WorkflowOutput(
        reward=reward, metrics={"win": float(reward == 1.0), **{f"opponent_{m}": float(theirs == m) for m in MOVES}}
    )
