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

from sparring import ChatModel, TunerHandle, Workflow, WorkflowOutput

from .rules import DEFAULT_REWARDS, SIDES, argue, judge_debate


def debaters(tuner: TunerHandle) -> dict[str, ChatModel]:
    """Each side on the trainable model of its name, or both on the one policy."""
    return {
        side: tuner.chat_model(side, target_tag=side, model=side if side in tuner.policies else None) for side in SIDES
    }


class Debate(Workflow):
    """Pro and con argue `rounds` rounds about `task["topic"]`; the auxiliary model `judge` decides."""

    trainable_targets = None

    async def execute(self, task: dict, tuner: TunerHandle) -> WorkflowOutput:
        args = task.get("workflow_args", {})
        topic = task["topic"]
        rounds, orders = int(args.get("rounds", 2)), int(args.get("judge_orders", 2))
        if rounds < 1 or orders not in (1, 2):
            raise ValueError(
                f"rounds must be >= 1 and judge_orders 1 or 2 (got rounds={rounds}, judge_orders={orders})"
            )
        judge_name = str(args.get("judge", "judge"))
        if judge_name not in tuner.auxiliary_models:
            raise ValueError(
                f"the debate needs a frozen judge: add auxiliary_models: {{{judge_name}: {{model_path: "
                f"...}}}} (have {sorted(tuner.auxiliary_models)})"
            )
        rewards = {key: float(args.get(key, default)) for key, default in DEFAULT_REWARDS.items()}
        arguments = await argue(topic, debaters(tuner), rounds)
        winner, unparsable = await judge_debate(
            tuner.auxiliary_models[judge_name].as_agent("judge", role="judge"), topic, arguments, orders
        )
        reward = {
            side: rewards["tie_reward"]
            if winner is None
            else rewards["win_reward" if side == winner else "loss_reward"]
            for side in SIDES
        }
        words = [len(text.split()) for side in SIDES for text in arguments[side]]
        metrics = {f"agent/{side}/win_rate": float(winner == side) for side in SIDES}
        metrics.update(
            tie_rate=float(winner is None), judge_unparsable_rate=unparsable, argument_words=sum(words) / len(words)
        )
        return WorkflowOutput(reward=reward, metrics=metrics, response={"winner": winner, "arguments": arguments})
