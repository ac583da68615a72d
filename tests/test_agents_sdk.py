"""The OpenAI Agents SDK (`openai-agents`), unchanged, trains through the per-episode endpoint on the tiny model.

Its agents run on the SDK's default model class, `OpenAIResponsesModel` (the Responses API, `POST /v1/responses`),
given the episode's endpoint the way a user gives the SDK any OpenAI-compatible server: an `AsyncOpenAI` with the
episode's `base_url` and key, through `OpenAIProvider` in the run's `RunConfig` (per run, as episodes run side by
side with keys of their own); tracing is off, as nothing may reach the network.

- `chatter` answers in free text. The tiny random model never ends a reply, so each is cut by `max_tokens`
  (`status: "incomplete"`), which the SDK raises as `ModelBehaviorError`: the workflow catches it and gives the
  episode reward 0, and the cut reply, recorded before the SDK raised, still trains.
- `answerer` has an `output_type`: the SDK sends it as `text.format` json_schema, the constrained reply completes,
  and the SDK parses it into the pydantic model.
- `tool_user` has a function tool that `tool_choice="required"` forces (held to the tool's schema), then the same
  `output_type`: the SDK calls the tool with the parsed arguments, sends the call and its output back, and parses
  the final answer: two Responses calls merged into one timeline, the tool's output not trained on.
- `streamer` is `answerer` run with `Runner.run_streamed` (`stream: true`, the Responses events).
- `chained` is `tool_user` run with `auto_previous_response_id=True` (opt-in; the SDK's default resends the
  history): its second call sends only the tool's output and the first response's id, which the episode's
  endpoint continues, so the episode records the same one timeline.
"""

from __future__ import annotations

import json
import random
from typing import Literal

import openai
import pytest
from pydantic import BaseModel

agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is a dev dependency: pip install openai-agents")

from agents import Agent, ModelBehaviorError, ModelSettings, OpenAIProvider, RunConfig, Runner, function_tool  # noqa: E402
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402
from loopback_training import train_two_steps  # noqa: E402

from sparring import Workflow, WorkflowOutput  # noqa: E402
from sparring.logging.rollouts import sampled_spans  # noqa: E402

TOOL_RESULT = "TOOLRESULT"
AGENTS = ("chatter", "answerer", "streamer", "tool_user", "chained")
SEEN: dict[str, list] = {
    "models": [],
    "tool_words": [],
    "final_outputs": [],
    "cut": [],
    "requests": [],
    "stream_events": [],
}


class Word(BaseModel):
    word: Literal["cat", "dog"]


@function_tool
def lookup(word: Literal["cat", "dog"]) -> str:
    """Look a word up."""
    SEEN["tool_words"].append(word)
    return f"{TOOL_RESULT} {word}"


class AgentsSdkWorkflow(Workflow):
    """Three Agents SDK agents, each on its own episode endpoint (see the module's docstring)."""

    trainable_targets = None

    async def execute(self, task, tuner):
        rewards = {}
        for name in AGENTS:
            endpoint = tuner.as_base_url_api_key(name)

            async def seen(request, name=name):  # only watches what the SDK sends
                SEEN["requests"].append((name, json.loads(request.content)))

            watched = openai.DefaultAsyncHttpxClient(event_hooks={"request": [seen]})
            async with openai.AsyncOpenAI(
                base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0, http_client=watched
            ) as client:
                run_config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
                if name == "chatter":
                    agent = Agent(name=name, instructions="Chat.", model=endpoint.model)
                elif name in ("answerer", "streamer"):
                    agent = Agent(
                        name=name,
                        instructions="Pick a word.",
                        model=endpoint.model,
                        output_type=Word,
                        model_settings=ModelSettings(max_tokens=48),
                    )
                else:  # tool_user, chained
                    settings = ModelSettings(tool_choice="required", max_tokens=48)
                    agent = Agent(
                        name=name,
                        instructions="Look a word up.",
                        model=endpoint.model,
                        tools=[lookup],
                        output_type=Word,
                        model_settings=settings,
                    )
                SEEN["models"].append(type(run_config.model_provider.get_model(agent.model)))
                try:
                    prompt, chained = f"Topic: {task['topic']}", name == "chained"
                    if name == "streamer":
                        result = Runner.run_streamed(agent, prompt, run_config=run_config, max_turns=4)
                        SEEN["stream_events"].extend([event.type async for event in result.stream_events()])
                    else:
                        result = await Runner.run(
                            agent, prompt, run_config=run_config, max_turns=4, auto_previous_response_id=chained
                        )
                except ModelBehaviorError as error:
                    # a reply cut by max_tokens: the SDK raises, the recorded turn still trains
                    SEEN["cut"].append(str(error))
                    rewards[name] = 0.0
                    continue
            SEEN["final_outputs"].append(result.final_output)
            rewards[name] = random.random()  # any spread trains
        return WorkflowOutput(reward=rewards)


def test_an_agents_sdk_agent_on_its_default_model_class_trains_two_steps(tiny_model_dir, tmp_path):
    rows = train_two_steps(AgentsSdkWorkflow, tiny_model_dir, tmp_path / "run", ["a", "bb"])
    assert set(SEEN["models"]) == {OpenAIResponsesModel}  # the SDK's default model class, unchanged
    assert sorted(row["agent"] for row in rows) == sorted(list(AGENTS) * 8)
    trained = dict.fromkeys(AGENTS, 0)
    for row in rows:
        spans = sampled_spans(row["loss_mask"])
        assert row["advantage"] is not None and spans
        trained[row["agent"]] += sum(end - start for start, end in spans)
        # tool_user, chained: the forced call, then the answer after the tool's output: one timeline
        if row["agent"] in ("tool_user", "chained"):
            assert row["num_calls"] == 2 and len(spans) == 2
            assert TOOL_RESULT in row["text"] and TOOL_RESULT not in "".join(row["completions"])
        else:
            assert row["num_calls"] == 1 and len(spans) == 1
    assert len(SEEN["cut"]) == 8 and all("max_output_tokens" in error for error in SEEN["cut"])  # only chatter's
    assert len(SEEN["tool_words"]) == 16 and set(SEEN["tool_words"]) <= {"cat", "dog"}  # the SDK ran every forced call
    assert (
        len(SEEN["final_outputs"]) == 32
        and "raw_response_event" in SEEN["stream_events"]
        and all(isinstance(output, Word) for output in SEEN["final_outputs"])
    )
    for name, body in SEEN["requests"]:
        assert ("previous_response_id" in body) == (
            name == "chained" and body["input"][0].get("type") == "function_call_output"
        )
        assert body.get("stream", False) == (name == "streamer")
    assert sum("previous_response_id" in body for _, body in SEEN["requests"]) == 8  # each chained run's second call
    print(f"trained tokens over 2 steps: {trained}")
    assert all(trained.values())
