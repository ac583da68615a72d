"""A debate against a frozen opponent, each motion argued from both sides, so a judge's taste for a side or a
speaking position cannot be what the policy learns.

One episode is a pair of debates on one motion, played at once: the policy argues for the motion against the
frozen auxiliary model `opponent` (the untrained base model by default), and against it with the opponent arguing
for. Each debate is `rounds` rounds of speeches (`debate.rules.argue`, 1 by default: one speech each) judged by
the frozen auxiliary model `judge`, which sees both speeches in an order fixed by a hash of their text and, with
`judge_orders: 2` (default), also in the other order (`debate.rules.judge_debate`). With `speech_check: true`
each side's speeches must first pass `debate.rules.speech_fault` (on the motion's subject, not the motion quoted
back, not one line repeated): a side that fails loses without the judge being asked, both failing is a tie. A
judge as small as SmolLM2-135M otherwise teaches the policy a stock phrase ("I'm ready.") that beats a rambling
opponent, or the motion echoed back (docs/results.md).

The policy's two seats are agents "pro" and "con" of roles "pro" and "con", each rewarded by its own debate
(`win_reward` 1, `loss_reward` -0.5, `tie_reward` 0), so GRPO compares a pro speech with the group's other pro
speeches (a judge that favours one side raises the whole pro group alike). Metrics: `win_rate` (of the policy's
two debates), `agent/<side>/win_rate`, `tie_rate`, `judge_unparsable_rate`, with the check `policy_fault_rate` /
`opponent_fault_rate` (share of the debates whose side failed it) and `judged_win_rate` (of the debates both sides
passed, the share the policy won: absent where none did), `policy_words` / `opponent_words`
(words per speech) and `longer_speech_win_rate` (of the decided debates whose speeches differ in length, the share
the longer one won: near 1 means the judge counts words; absent from an episode without such a debate).

    sparring train debate_duel
    sparring eval debate_duel --tasks 200 [--adapter RUN_DIR/checkpoints/lora-0/sampler_weights/final]
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from sparring import ChatModel, WorkflowOutput, takes_args

from ..debate.rules import SIDES, argue, judge_debate, speech_fault
from ..debate.workflow import DebateArgs

OTHER = {"pro": "con", "con": "pro"}


def _auxiliary(auxiliary_models: dict[str, ChatModel], name: str, what: str) -> ChatModel:
    if name not in auxiliary_models:
        raise ValueError(
            f"the debate duel needs {what}: add auxiliary_models: {{{name}: {{model_path: ...}}}} (have "
            f"{sorted(auxiliary_models)})"
        )
    return auxiliary_models[name]


class DebateDuelArgs(DebateArgs):
    """The duel's `workflow_args`: the debate's, one round by default, with the opponent and the speech check."""

    rounds: int = Field(1, ge=1)
    """Rounds of speeches in each of the two debates (one speech each by default)."""
    opponent: str = "opponent"
    """The name of the frozen auxiliary model the policy debates."""
    speech_check: bool = False
    """A side whose speeches fail `debate.rules.speech_fault` (off the subject, the motion quoted back, one line
    repeated) loses without the judge being asked: what a small judge would otherwise reward."""


@takes_args(DebateDuelArgs)
async def debate_duel(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = DebateDuelArgs.of(task)
    topic = task["topic"]
    rounds, orders, checked = args.rounds, args.judge_orders, args.speech_check
    opponent = _auxiliary(auxiliary_models, args.opponent, "a frozen opponent")
    judge = _auxiliary(auxiliary_models, args.judge, "a frozen judge").as_agent("judge", role="judge")
    faults: dict[str, dict[str, str | None]] = {}  # the policy's side -> each speaker's fault

    async def debate(side: str) -> tuple[dict[str, list[str]], str | None, float]:
        speakers = {
            side: model.as_agent(side, role=side),
            OTHER[side]: opponent.as_agent(f"opponent_{OTHER[side]}", role="opponent"),
        }
        arguments = await argue(topic, speakers, rounds)
        if checked:
            faults[side] = {speaker: speech_fault(topic, arguments[speaker]) for speaker in SIDES}
            passed = [speaker for speaker in SIDES if faults[side][speaker] is None]
            if len(passed) < len(SIDES):  # the judge is not asked: the side that argued wins, or nobody
                return arguments, passed[0] if passed else None, 0.0
        return arguments, *await judge_debate(judge, topic, arguments, orders)

    played = dict(zip(SIDES, await asyncio.gather(*(debate(side) for side in SIDES)), strict=True))
    reward = {side: args.reward(side, winner) for side, (_, winner, _) in played.items()}
    won = {side: float(winner == side) for side, (_, winner, _) in played.items()}
    metrics = {f"agent/{side}/win_rate": value for side, value in won.items()}
    metrics["win_rate"] = sum(won.values()) / len(SIDES)
    metrics["tie_rate"] = sum(winner is None for _, winner, _ in played.values()) / len(SIDES)
    metrics["judge_unparsable_rate"] = sum(unparsable for *_, unparsable in played.values()) / len(SIDES)
    if checked:
        metrics["policy_fault_rate"] = sum(faults[side][side] is not None for side in SIDES) / len(SIDES)
        metrics["opponent_fault_rate"] = sum(faults[side][OTHER[side]] is not None for side in SIDES) / len(SIDES)
        judged = [side for side in SIDES if all(fault is None for fault in faults[side].values())]
        if judged:  # the win rate before the judge alone: what is left of it once forfeits are set aside
            metrics["judged_win_rate"] = sum(won[side] for side in judged) / len(judged)
    metrics["policy_words"] = _words([text for side, (arguments, *_) in played.items() for text in arguments[side]])
    metrics["opponent_words"] = _words(
        [text for side, (arguments, *_) in played.items() for text in arguments[OTHER[side]]]
    )
    longer_won = _longer_speech_wins([(arguments, winner) for arguments, winner, _ in played.values()])
    if longer_won:  # absent where no decided debate had speeches of different lengths
        metrics["longer_speech_win_rate"] = sum(longer_won) / len(longer_won)
    return WorkflowOutput(
        reward=reward,
        metrics=metrics,
        response={side: {"winner": winner, "arguments": arguments} for side, (arguments, winner, _) in played.items()},
    )


def _word_count(speeches: list[str]) -> int:
    return sum(len(text.split()) for text in speeches)


def _words(speeches: list[str]) -> float:
    return _word_count(speeches) / len(speeches)


def _longer_speech_wins(debates: list[tuple[dict[str, list[str]], str | None]]) -> list[bool]:
    """For each decided debate whose sides spoke different numbers of words: whether the longer side won."""
    return [
        lengths[winner] > lengths[OTHER[winner]]
        for arguments, winner in debates
        if winner is not None
        for lengths in [{side: _word_count(arguments[side]) for side in SIDES}]
        if lengths["pro"] != lengths["con"]
    ]
