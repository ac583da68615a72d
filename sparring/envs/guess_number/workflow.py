"""Guess the number: the policy guesses, a Python referee answers "too high" / "too low".

The simplest multi-turn setting (a programmatic counterpart, no second LLM):
each task holds a secret integer; the agent has `max_turns` guesses and sees
the referee's answer after each. Every guess is a turn of one conversation,
so the whole game trains as one merged sequence.

Reward: 1 for finding the number, with a small bonus for finding it early;
otherwise partial credit for how close the last valid guess came. A reply
with no number in range is an invalid move: it costs `invalid_penalty` and
the referee says so. `workflow_args` (`GuessNumberArgs`) can change `low`, `high`, `max_turns`.

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

from pydantic import Field, model_validator

from sparring import ChatModel, WorkflowArgs, WorkflowOutput, takes_args

from . import rules


class GuessNumberArgs(WorkflowArgs):
    """The game's `workflow_args`."""

    low: int = 1
    """The smallest number the secret (and a valid guess) can be."""
    high: int = 16
    """The largest number the secret (and a valid guess) can be."""
    max_turns: int = Field(5, ge=1)
    """Guesses before the game ends unsolved."""
    invalid_penalty: float = 0.1
    """What a guess with no number in range costs: the score of an invalid move."""
    progress_bonus: float = 0.5
    """Each guess's turn reward is this times its progress (the share of the possible numbers it rules out);
    training signal only, never part of the reported reward."""

    @model_validator(mode="after")
    def _a_range(self) -> GuessNumberArgs:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not be above high ({self.high})")
        return self


@takes_args(GuessNumberArgs)
async def guess_number(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = GuessNumberArgs.of(task)
    low, high, max_turns = args.low, args.high, args.max_turns
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
    metrics = rules.score(secret, guesses, low, high, max_turns, args.invalid_penalty)
    progress = rules.guess_progress(secret, guesses, low, high)
    metrics["consistent_rate"] = sum(share > 0 for share in progress) / len(progress)
    metrics["progress"] = sum(progress) / len(progress)
    turn_rewards = [args.progress_bonus * share for share in progress]
    return WorkflowOutput(reward=metrics.pop("reward"), metrics=metrics, response=guesses, turn_rewards=turn_rewards)
