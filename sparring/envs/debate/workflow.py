"""Debate: two trainable models argue opposite sides of a motion; a frozen judge picks the winner.

The several-trainable-models case. Train it with two adapters on one base
model, each with its own optimizer: `tune(models={"pro": ..., "con": ...})`
(or `models:` in YAML). Agent "pro" argues for the motion on the model named
"pro", agent "con" against it on "con"; with a single trainable model the
policy argues both sides (self-debate), still as two agents of two roles.

An episode runs `rounds` rounds (pro speaks, then con), each debater keeping
its own conversation, so its turns train as one sequence. The judge is the
auxiliary model `judge` (the frozen base model, unless configured
otherwise). After one worked example it sees the two sides as "Speaker 1"
and "Speaker 2" and answers 1 or 2; the first 1 or 2 in its reply is its
vote, a reply with neither is no vote (`judge_unparsable_rate`).

Small judges mostly vote for a position, not an argument (SmolLM2-135M
answers "1" almost always), so by default (`judge_orders: 2`) it is asked in
both orders: agreeing votes decide; disagreeing ones go to the vote the judge
gave with the higher probability (its reply's logprob), which cancels the
position bias; with no logprobs (a remote judge) they are a tie. With
`judge_orders: 1` the order is set by a hash of the arguments, so a bias
for a position is noise, not an advantage of one side. No vote at all is a tie.

Rewards (`workflow_args`): the winner `win_reward` (1), the loser
`loss_reward` (-0.5), both `tie_reward` (0) on a tie. Metrics:
`agent/<side>/win_rate`, `tie_rate`, `judge_unparsable_rate`,
`argument_words`.

    sparring train debate        # this folder's config.yaml: two adapters, a frozen judge
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparring import ChatModel, TunerHandle, Workflow, WorkflowArgs, WorkflowOutput

from .rules import SIDES, argue, judge_debate


class DebateArgs(WorkflowArgs):
    """The debate's `workflow_args` (the debate duel's add to them)."""

    rounds: int = Field(2, ge=1)
    """Rounds of speeches (pro speaks, then con); each side's speeches are one conversation, one training sequence."""
    judge_orders: Literal[1, 2] = 2
    """2 asks the judge in both speaker orders, which cancels a small judge's taste for a position; 1 asks once,
    in an order set by a hash of the arguments."""
    judge: str = "judge"
    """The name of the frozen auxiliary model that judges."""
    win_reward: float = 1.0
    """The winner's reward."""
    loss_reward: float = -0.5
    """The loser's reward."""
    tie_reward: float = 0.0
    """Both sides' reward when the judge decides nothing."""

    def reward(self, side: str, winner: str | None) -> float:
        """`side`'s reward when `winner` won (None: a tie)."""
        return self.tie_reward if winner is None else self.win_reward if winner == side else self.loss_reward


def debaters(tuner: TunerHandle) -> dict[str, ChatModel]:
    """Each side on the trainable model of its name, or both on the one policy."""
    return {
        side: tuner.chat_model(side, target_tag=side, model=side if side in tuner.policies else None) for side in SIDES
    }


class Debate(Workflow):
    """Pro and con argue `rounds` rounds about `task["topic"]`; the auxiliary model `judge` decides."""

    trainable_targets = None
    workflow_args = DebateArgs

    async def execute(self, task: dict, tuner: TunerHandle) -> WorkflowOutput:
        args = DebateArgs.of(task)
        topic = task["topic"]
        if args.judge not in tuner.auxiliary_models:
            raise ValueError(
                f"the debate needs a frozen judge: add auxiliary_models: {{{args.judge}: {{model_path: ...}}}} "
                f"(have {sorted(tuner.auxiliary_models)})"
            )
        arguments = await argue(topic, debaters(tuner), args.rounds)
        judge = tuner.auxiliary_models[args.judge].as_agent("judge", role="judge")
        winner, unparsable = await judge_debate(judge, topic, arguments, args.judge_orders)
        reward = {side: args.reward(side, winner) for side in SIDES}
        words = [len(text.split()) for side in SIDES for text in arguments[side]]
        metrics = {f"agent/{side}/win_rate": float(winner == side) for side in SIDES}
        metrics.update(
            tie_rate=float(winner is None), judge_unparsable_rate=unparsable, argument_words=sum(words) / len(words)
        )
        return WorkflowOutput(reward=reward, metrics=metrics, response={"winner": winner, "arguments": arguments})
