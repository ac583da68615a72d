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

    sparring train guess_number        # this folder's config.yaml
"""

from __future__ import annotations

import random

from sparring import ChatModel, WorkflowOutput

from . import rules


async def guess_number(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = task.get("workflow_args", {})
    low, high = int(args.get("low", 1)), int(args.get("high", 16))
    max_turns = int(args.get("max_turns", 5))
    secret = int(task["secret"]) if "secret" in task else random.Random(task.get("seed", 0)).randint(low, high)
    history = [
        {"role": "system", "content": rules.SYSTEM},
        {"role": "user", "content": rules.RULES.format(low=low, high=high)},
    ]
    guesses: list[int | None] = []
    while len(guesses) < max_turns:
        reply = await model(history)
        guess = rules.parse_guess(reply.content, low, high)
        guesses.append(guess)
        if guess == secret:
            break
        history += [reply.message, {"role": "user", "content": rules.referee(guess, secret, low, high)}]
    metrics = rules.score(secret, guesses, low, high, max_turns, float(args.get("invalid_penalty", 0.1)))
    progress = rules.guess_progress(secret, guesses, low, high)
    metrics["consistent_rate"] = sum(share > 0 for share in progress) / len(progress)
    metrics["progress"] = sum(progress) / len(progress)
    bonus = float(args.get("progress_bonus", 0.5))
    return WorkflowOutput(
        reward=metrics.pop("reward"),
        metrics=metrics,
        response=guesses,
        turn_rewards=[bonus * share for share in progress],
    )
