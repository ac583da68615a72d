"""What timeline merging saves: one sequence per agent conversation vs one per model call.

Runs real multi-agent and multi-turn episodes on SmolLM2 (by default), then
builds the training data twice from the same episodes:

- merged: what sparring trains — one datum per agent conversation, every
  completion loss-masked in;
- per call: one datum per model call (its whole prompt + its completion), what a
  trainer without prefix merging would send.

Three workloads, each a `Scenario`:

- `guess_number`: the packaged game, 4 turns against a Python referee;
- `tool_agent`: an 8-call agent on the public tool API: it must call a
  `calculator` tool (`tool_choice="required"`) seven times, each result
  returned as a `tool` message, then answers with the total
  (`tool_choice="none"`), all in one conversation;
- `werewolf`: the packaged 7-player game as its config.yaml ships it (the two
  werewolves trained, the five others a frozen participant model, 2 rounds,
  each round a fresh conversation from a summary).

Both assemblies of a workload are trained with forward_backward (ppo) on the
same fresh adapter; the table shows the tokens each processes, wall time, and
their ratios, measured in the same run.

    .venv/bin/python benchmarks/timelines.py [--scenarios guess_number,tool_agent,werewolf] [--quick]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common import print_table, resolve_model_name

from sparring import ServiceClient, TunerHandle, WorkflowOutput, types
from sparring.algorithms import build_datums
from sparring.envs import guess_number, werewolf
from sparring.rollout import FrozenChatModel, PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes

TOOL_AGENT_CALLS = 8
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression of numbers, + - * / and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 12 + 30"}},
            "required": ["expression"],
        },
    },
}
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculate(arguments: Any) -> str:
    """The calculator tool: the value of `expression`, or an error line the agent reads (small models send garbage)."""
    try:
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        return f"{_evaluate(ast.parse(str(arguments['expression']), mode='eval').body):g}"
    except (ValueError, TypeError, KeyError, SyntaxError, ZeroDivisionError, OverflowError) as error:
        return f"error: {type(error).__name__}"


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("not arithmetic")


async def tool_agent(task: dict, model, auxiliary_models: dict) -> WorkflowOutput:
    """A forced calculator call per number (7 by default), each answered by a tool message, then the total: one
    conversation."""
    numbers = task["numbers"]
    history = [
        {
            "role": "user",
            "content": "Add these numbers with the calculator, one addition per call, then tell me the total: "
            f"{', '.join(map(str, numbers))}.",
        }
    ]
    errors = 0
    for _ in numbers:
        reply = await model(history, tools=[CALCULATOR], tool_choice="required")
        history.append(reply.message)
        for call in reply.tool_calls:
            result = calculate(call["function"]["arguments"])
            errors += result.startswith("error")
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    answer = await model(history, tools=[CALCULATOR], tool_choice="none")
    return WorkflowOutput(reward=float(str(sum(numbers)) in answer.content), metrics={"tool_errors": float(errors)})


@dataclass
class Scenario:
    """One workload: its workflow, its tasks and the reply budget."""

    title: str
    """How the table names it."""
    workflow: Callable
    """The episode, `(task, model, auxiliary_models) -> WorkflowOutput`."""
    make_tasks: Callable[[int, bool], list[dict]]
    """(count, quick) -> that many tasks; quick ones fit the tiny test model's 1024-token context."""
    max_tokens: int
    """Most tokens per model call (a workflow may ask for fewer)."""


SCENARIOS = {
    "guess_number": Scenario(
        "guess the number, 4 turns",
        guess_number.guess_number,
        lambda count, quick: [
            {**task, "workflow_args": {"low": 1, "high": 1000, "max_turns": 4}}
            for task in guess_number.make_tasks("train", count, seed=7, low=1, high=1000)
        ],
        12,
    ),
    "tool_agent": Scenario(
        "tool agent, calculator",
        tool_agent,
        lambda count, quick: [
            {
                "task_id": f"sum-{i}",
                "numbers": [(i * 7 + k * 13) % 90 + 10 for k in range(3 if quick else TOOL_AGENT_CALLS - 1)],
            }
            for i in range(count)
        ],
        32,
    ),
    "werewolf": Scenario(
        "werewolf, 7 players, 2 rounds",
        werewolf.werewolf,
        lambda count, quick: [
            {**task, "workflow_args": {"trainable_target": "werewolf", "max_rounds": 2, "speech_tokens": 16}}
            for task in werewolf.make_tasks("eval", count, seed=100_000)
        ],
        24,
    ),
}


def per_call_datums(merged: list[types.Datum]) -> list[types.Datum]:
    """Split each merged datum at the end of every completion run: the data one-datum-per-call would give."""
    split = []
    for datum in merged:
        tokens = datum.model_input.to_ints()
        targets = datum.loss_fn_inputs["target_tokens"].tolist()
        logprobs = datum.loss_fn_inputs["logprobs"].tolist()
        advantages = datum.loss_fn_inputs["advantages"].tolist()
        start = None
        for position, advantage in enumerate([*advantages, 0.0]):
            if advantage != 0.0 and start is None:
                start = position
            elif advantage == 0.0 and start is not None:
                split.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens[:position]),
                        loss_fn_inputs={
                            "target_tokens": targets[:position],
                            "logprobs": logprobs[:position],
                            "advantages": [0.0] * start + advantages[start:position],
                        },
                    )
                )
                start = None
    return split


def timed_forward_backward(client, data: list[types.Datum]) -> float:
    started = time.perf_counter()
    client.forward_backward(data, "ppo").result()
    return time.perf_counter() - started


async def measure(
    name: str, scenario: Scenario, episodes: int, service: ServiceClient, model_name: str, quick: bool
) -> list:
    """One table row: run the episodes, assemble both ways, time forward_backward on each."""
    client = service.create_lora_training_client(model_name, rank=16, seed=0)
    defaults = {"max_tokens": 8 if quick else scenario.max_tokens}
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults=defaults)
    participant = FrozenChatModel(
        service.create_sampling_client(base_model=model_name), defaults=defaults, agent="participant"
    )
    make_tuner = lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"participant": participant})  # noqa: E731
    settings = RunnerSettings(group_size=1, episode_timeout_s=3600.0)
    finished = await run_episodes(
        as_episode_fn(scenario.workflow), scenario.make_tasks(episodes, quick), make_tuner, settings
    )
    failed = [e.error for e in finished if e.error is not None]
    if failed:
        raise RuntimeError(f"{name}: {len(failed)} of {len(finished)} episodes failed, first: {failed[0]}")
    # Unit advantages on every sampled token: the benchmark measures data size and time, not learning.
    by_model = build_datums(finished, {(i, agent): 1.0 for i, e in enumerate(finished) for agent in e.rewards})
    merged = [datum for data in by_model.values() for datum in data]
    per_call = per_call_datums(merged)
    timed_forward_backward(client, merged[:2])  # warm-up
    merged_tokens, call_tokens = (sum(d.model_input.length for d in data) for data in (merged, per_call))
    merged_s, call_s = timed_forward_backward(client, merged), timed_forward_backward(client, per_call)
    calls = len(per_call) / len(merged)
    return [
        scenario.title,
        episodes,
        calls,
        len(merged),
        len(per_call),
        merged_tokens,
        call_tokens,
        call_tokens / merged_tokens,
        merged_s,
        call_s,
        call_s / merged_s,
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, from {', '.join(SCENARIOS)}"
    )
    parser.add_argument(
        "--episodes", default="16,8,4", help="episodes of each scenario, in order (one number: all alike)"
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny random model, 2 episodes each, 8-token replies, a 4-call tool agent: a smoke test",
    )
    args = parser.parse_args()
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    counts = [int(c) for c in args.episodes.split(",")]
    counts = [2] * len(names) if args.quick else (counts * len(names) if len(counts) == 1 else counts)
    if len(counts) != len(names):
        parser.error(f"--episodes gives {len(counts)} numbers for {len(names)} scenarios")
    model_name = resolve_model_name(args.model, args.quick)
    load_before = os.getloadavg()[0]
    service = ServiceClient()
    rows = [
        await measure(name, SCENARIOS[name], count, service, model_name, args.quick)
        for name, count in zip(names, counts, strict=True)
    ]
    print(
        f"\ntimeline merging on {model_name}: forward_backward (ppo), LoRA r=16, unit advantages on every sampled token"
    )
    print(
        f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other processes "
        "share the cores)\n"
    )
    headers = [
        "workload",
        "episodes",
        "calls/timeline",
        "datums merged",
        "per call",
        "tokens merged",
        "per call",
        "fewer tokens",
        "fwd+bwd s merged",
        "per call",
        "faster",
    ]
    print_table(headers, rows)


if __name__ == "__main__":
    asyncio.run(main())
