"""AgentScope agents on sparring models, for whichever AgentScope major is installed.

The suite runs in-process against the AgentScope in .venv (2.x, the `dev` extra) and, through
`test_agentscope1_runs_this_suite`, once more in a subprocess against AgentScope 1.x installed into a
cached overlay directory (`agentscope_suite`). Most tests script the model's replies (real renderer,
recorder and timeline merging; only the sampled tokens are fixed) so tool calls happen deterministically;
the acceptance test trains a tool-equipped ReAct agent with tune() on the tiny random model.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("agentscope")

from agentscope_suite import in_agentscope1_subprocess, load_example, run_on_agentscope1  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from scripted_sampler import ScriptedSampler  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from sparring import (  # noqa: E402
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerHandle,
    TunerModelConfig,
    Workflow,
    WorkflowOutput,
    tune,
)
from sparring.integrations import (  # noqa: E402
    AgentScopeChatModel,
    ForeignTurnsWarning,
    HistoryRewriteWarning,
    TimelineFormatter,
    agentscope_major,
    agentscope_model,
)
from sparring.logging import read_rollouts  # noqa: E402
from sparring.models import get_renderer  # noqa: E402
from sparring.models.tool_calls import tool_call_prefill  # noqa: E402
from sparring.rollout import (  # noqa: E402
    ChatModel,
    ChatResponse,
    EpisodeRecorder,
    FrozenChatModel,
    PolicyChatModel,
    RunnerSettings,
    as_episode_fn,
    merge_calls,
    recording,
    run_episodes,
)

MAJOR = agentscope_major()
SYSTEM = "You multiply numbers with the multiply tool."
STRUCTURED_TOOL = "generate_response" if MAJOR == 1 else "GenerateStructuredOutput"


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    return get_renderer(AutoTokenizer.from_pretrained(tiny_model_dir))


def scripted(renderer, replies, agent="solver", delay=0.0) -> PolicyChatModel:
    return PolicyChatModel(ScriptedSampler(renderer, replies, delay), agent=agent, role=agent)


class Answer(BaseModel):
    value: int


# ---------------------------------------------------------------- the two majors' agent APIs


def multiply(a: int, b: int):
    """Multiply two integers.

    Args:
        a (int): The first factor.
        b (int): The second factor.
    """
    if MAJOR == 1:
        from agentscope.message import TextBlock
        from agentscope.tool import ToolResponse

        return ToolResponse(content=[TextBlock(type="text", text=str(a * b))])
    return str(a * b)


def make_agent(model, formatter=None, name="solver"):
    """A ReAct agent with the multiply tool: `ReActAgent` on 1.x, `Agent` on 2.x."""
    if MAJOR == 1:
        from agentscope.agent import ReActAgent
        from agentscope.tool import Toolkit

        toolkit = Toolkit()
        toolkit.register_tool_function(multiply)
        agent = ReActAgent(
            name=name,
            sys_prompt=SYSTEM,
            model=model,
            formatter=formatter or TimelineFormatter(name),
            toolkit=toolkit,
            max_iters=3,
        )
        agent.set_console_output_enabled(False)
        return agent
    from agentscope.agent import Agent, ReActConfig
    from agentscope.permission import PermissionBehavior, PermissionDecision
    from agentscope.tool import FunctionTool, Toolkit

    if formatter is not None:
        model.formatter = formatter
    tool = FunctionTool(
        multiply, permission=PermissionDecision(behavior=PermissionBehavior.ALLOW, message="arithmetic")
    )
    return Agent(
        name=name,
        system_prompt=SYSTEM,
        model=model,
        toolkit=Toolkit(tools=[tool]),
        react_config=ReActConfig(max_iters=3),
    )


async def ask(agent, text: str, schema=None):
    if MAJOR == 1:
        from agentscope.message import Msg

        return await agent(Msg("user", text, "user"), structured_model=schema)
    from agentscope.message import UserMsg

    return await agent.reply(UserMsg(name="user", content=text), structured_schema=schema)


async def observe(agent, speaker: str, text: str) -> None:
    if MAJOR == 1:
        from agentscope.message import Msg

        await agent.observe(Msg(speaker, text, "assistant"))
    else:
        from agentscope.message import AssistantMsg

        await agent.observe(AssistantMsg(name=speaker, content=text))


def agentscope_formatter(kind: str):
    from agentscope import formatter

    return getattr(formatter, kind)()


def run_in_episode(coroutine_fn):
    with recording(EpisodeRecorder()) as recorder:
        result = asyncio.run(coroutine_fn())
    return result, recorder


def prompts_of(recorder, agent="solver") -> list[list[dict]]:
    return [entry["messages"] for entry in recorder.transcripts[agent]]


# ---------------------------------------------------------------- tests


def test_tool_call_round_trip_is_one_timeline(renderer):
    policy = scripted(
        renderer, [tool_call("multiply", a=3, b=4), tool_call("multiply", a=12, b=2), "The product is 24."]
    )
    agent = make_agent(agentscope_model(policy))
    reply, recorder = run_in_episode(lambda: ask(agent, "What is 3 times 4 times 2?"))

    assert reply.get_text_content() == "The product is 24."
    first, second, third = prompts_of(recorder)
    assert [m["content"] for m in third if m["role"] == "tool"] == [
        "12",
        "24",
    ]  # AgentScope ran both calls on the parsed arguments
    (call,) = second[len(first)]["tool_calls"]
    assert call["function"]["name"] == "multiply" and json.loads(call["function"]["arguments"]) == {"a": 3, "b": 4}
    assert second[: len(first)] == first and third[: len(second)] == second
    (timeline,) = merge_calls(recorder.calls)
    assert timeline.num_calls == 3 and sum(timeline.loss_mask) == sum(len(c.completion_tokens) for c in recorder.calls)
    assert '"name": "multiply"' in renderer.decode(recorder.calls[0].prompt_tokens)  # the tool schema is in the prompt


def test_structured_output_through_the_forced_tool(renderer):
    # 1.x's ReActAgent asks for a structured answer with tool_choice="required": the reply opens with a tool call.
    # 2.x's Agent lets the model answer freely until max_iters, then forces its structured-output tool by name.
    free = [] if MAJOR == 1 else ["Let me think.", "Still thinking.", "Almost there."]
    forced_reply = tool_call(STRUCTURED_TOOL, value=12)
    policy = scripted(renderer, [*free, forced_reply, "It is 12."])
    agent = make_agent(agentscope_model(policy))
    reply, recorder = run_in_episode(lambda: ask(agent, "What is 3 times 4?", schema=Answer))
    assert (reply.metadata if MAJOR == 1 else reply.structured_output) == {"value": 12}
    assert f'"name": "{STRUCTURED_TOOL}"' in renderer.decode(recorder.calls[0].prompt_tokens)

    prefill = tool_call_prefill() if MAJOR == 1 else tool_call_prefill(STRUCTURED_TOOL)
    assert policy.sampler.prefills[: len(free) + 1] == [""] * len(free) + [prefill]
    forced = recorder.calls[len(free)]
    assert renderer.decode(forced.prompt_tokens).endswith(prefill)  # the prefill is prompt...
    assert (
        renderer.decode(forced.completion_tokens) == forced_reply[len(prefill) :] + "<|im_end|>"
    )  # ...only the rest was sampled
    (timeline,) = merge_calls(recorder.calls)
    assert timeline.num_calls == len(recorder.calls) and sum(timeline.loss_mask) == sum(
        len(c.completion_tokens) for c in recorder.calls
    )

    direct_model = scripted(renderer, [tool_call("generate_structured_output", value=7)])
    direct = agentscope_model(direct_model)
    if MAJOR == 1:
        result = asyncio.run(direct([{"role": "user", "content": "Seven?"}], structured_model=Answer))
        assert result.metadata == {"value": 7}
    else:
        from agentscope.message import UserMsg

        result = asyncio.run(direct.generate_structured_output([UserMsg(name="user", content="Seven?")], Answer))
        assert result.content == {"value": 7}
    assert direct_model.sampler.prefills == [tool_call_prefill("generate_structured_output")]


def test_a_local_model_is_really_forced_to_call_the_structured_output_tool_with_valid_arguments(
    tiny_model_dir, tmp_path
):
    """The tiny random model samples garbage as free text, yet its structured output is a call of the forced tool
    whose arguments validate: a local model holds them to the schema."""
    frozen = FrozenChatModel(
        ServiceClient(base_dir=tmp_path).create_sampling_client(base_model=str(tiny_model_dir)),
        defaults={"max_tokens": 64},
    )
    model = agentscope_model(frozen)

    async def structured_call():
        if MAJOR == 1:
            result = await model([{"role": "user", "content": "Seven?"}], structured_model=Answer)
            return [block["name"] for block in result.content if block["type"] == "tool_use"], result.metadata
        from agentscope.message import UserMsg
        from agentscope.tool import ToolChoice

        result = await model.generate_structured_output(
            [UserMsg(name="user", content="Seven?")], Answer, tool_choice=ToolChoice(mode="generate_structured_output")
        )
        return None, result.content

    (names, structured), recorder = run_in_episode(structured_call)
    (entry,) = recorder.transcripts[frozen.agent]
    assert [call["function"]["name"] for call in entry["response"]["tool_calls"]] == ["generate_structured_output"]
    Answer.model_validate(structured)
    if MAJOR == 1:
        assert names == ["generate_structured_output"]  # AgentScope got it as a ToolUseBlock too


class ForcingModel(ChatModel):
    """A chat model that can force tool calls (as an OpenAI-compatible endpoint does): shows what it is asked."""

    def __init__(self):
        self.seen: list[dict] = []

    async def __call__(self, messages, tools=None, tool_choice=None, **sampling):
        self.seen.append({"tools": [t["function"]["name"] for t in tools or []], "tool_choice": tool_choice})
        return ChatResponse(
            message={
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "multiply", "arguments": '{"a": 1, "b": 2}'}}],
            }
        )


def test_tool_choice_reaches_a_model_that_can_force_it_and_none_drops_tool_calls():
    forcing = ForcingModel()
    model = agentscope_model(forcing)
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
        for n in ("multiply", "add")
    ]
    if MAJOR == 1:
        forced = asyncio.run(model([{"role": "user", "content": "go"}], tools=tools, tool_choice="multiply"))
        free = asyncio.run(model([{"role": "user", "content": "go"}], tools=tools, tool_choice="none"))
        with pytest.raises(ValueError, match="subtract"):
            asyncio.run(model([{"role": "user", "content": "go"}], tools=tools, tool_choice="subtract"))
    else:
        from agentscope.message import UserMsg
        from agentscope.tool import ToolChoice

        forced = asyncio.run(
            model([UserMsg(name="user", content="go")], tools=tools, tool_choice=ToolChoice(mode="multiply"))
        )
        free = asyncio.run(
            model([UserMsg(name="user", content="go")], tools=tools, tool_choice=ToolChoice(mode="none"))
        )
        with pytest.raises(ValueError, match="subtract"):
            asyncio.run(
                model([UserMsg(name="user", content="go")], tools=tools, tool_choice=ToolChoice(mode="subtract"))
            )
    assert forcing.seen[0] == {
        "tools": ["multiply", "add"],
        "tool_choice": {"type": "function", "function": {"name": "multiply"}},
    }
    assert [b["type"] if isinstance(b, dict) else b.type for b in forced.content] == [
        "tool_use" if MAJOR == 1 else "tool_call"
    ]
    assert forcing.seen[1]["tool_choice"] == "none" and [
        b["type"] if isinstance(b, dict) else b.type for b in free.content
    ] == ["text"]


def test_an_untrained_agent_gets_its_debug_model(renderer):
    policy, helper = (
        scripted(renderer, ["hi"], agent="policy"),
        FrozenChatModel(ScriptedSampler(renderer, ["fine"]), agent="helper"),
    )
    own_agentscope_model = agentscope_model(helper)
    tuner = TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": helper}, trainable_targets=["solver"])

    assert (
        tuner.as_agentscope_model("judge", target_tag="judge", debug_model=own_agentscope_model) is own_agentscope_model
    )
    frozen = tuner.as_agentscope_model("judge", target_tag="judge", debug_model="helper")
    trained = tuner.as_agentscope_model("alice", target_tag="solver", debug_model=own_agentscope_model)
    assert (
        isinstance(frozen, AgentScopeChatModel)
        and not frozen.chat_model.trainable
        and frozen.chat_model.agent == "judge"
    )
    assert trained.chat_model.trainable and trained.chat_model.agent == "alice"
    with pytest.raises(ValueError, match="no debug_model"):
        tuner.as_agentscope_model("judge", target_tag="judge")

    reply, recorder = run_in_episode(lambda: ask(make_agent(frozen, name="judge"), "How are you?"))
    assert reply.get_text_content() == "fine"
    assert recorder.calls == [] and [t["trainable"] for t in recorder.transcripts["judge"]] == [False]


def test_formatters_that_lose_the_timeline_warn_and_timeline_formatter_merges(renderer):
    async def three_turns(agent):
        for question in ("3 times 4?", "and 5 times 6?", "and 7 times 8?"):
            await observe(agent, "Bob", f"I say {question}")
            await ask(agent, question)

    folded = make_agent(
        agentscope_model(scripted(renderer, ["12", "30", "56"])),
        formatter=agentscope_formatter("OpenAIMultiAgentFormatter"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        _, recorder = run_in_episode(lambda: three_turns(folded))
    rewrites = [w for w in caught if issubclass(w.category, HistoryRewriteWarning)]
    assert len(rewrites) == 1 and "'solver'" in str(rewrites[0].message)  # two rewrites, one warning per agent
    assert len(merge_calls(recorder.calls)) == 3

    unnamed = make_agent(
        agentscope_model(scripted(renderer, ["12", "30", "56"])), formatter=agentscope_formatter("OpenAIChatFormatter")
    )
    with pytest.warns(ForeignTurnsWarning, match=r"\['Bob', 'solver'\]"):
        run_in_episode(lambda: three_turns(unnamed))

    kept = make_agent(agentscope_model(scripted(renderer, ["12", "30", "56"])))
    with warnings.catch_warnings():
        warnings.simplefilter("error", HistoryRewriteWarning)
        warnings.simplefilter("error", ForeignTurnsWarning)
        _, recorder = run_in_episode(lambda: three_turns(kept))
    (timeline,) = merge_calls(recorder.calls)
    assert timeline.num_calls == 3
    last = prompts_of(recorder)[-1]
    assert [m["role"] for m in last[1:]] == ["user", "user", "assistant"] * 2 + ["user", "user"]
    assert last[1]["content"] == "Bob: I say 3 times 4?" and last[3]["content"] == "12"

    misnamed = make_agent(
        agentscope_model(scripted(renderer, [tool_call("multiply", a=3, b=4), "12"], agent="Solver")),
        formatter=TimelineFormatter("Solver"),
    )
    with pytest.raises(ValueError, match="give the agent the name 'Solver'"):
        run_in_episode(lambda: ask(misnamed, "3 times 4?"))


class ThreeQuestions(Workflow):
    async def execute(self, task, tuner):
        agent = make_agent(tuner.as_agentscope_model("solver"))
        for question in ("3 times 4?", "5 times 6?", "7 times 8?"):
            await ask(agent, question)
        return WorkflowOutput(reward=1.0)


def test_an_episode_timeout_ends_agents_that_swallow_cancellation(renderer):
    policy = scripted(renderer, ["12", "30", "56"], delay=0.5)
    settings = RunnerSettings(group_size=1, episode_timeout_s=0.3)
    (episode,) = asyncio.run(
        run_episodes(
            as_episode_fn(ThreeQuestions),
            [{"task_id": "0"}],
            lambda: TunerHandle(policies={"policy": policy}),
            settings,
        )
    )
    assert (
        episode.error is not None and "EpisodeCancelledError" in episode.error
    )  # not a finished episode with reward 1
    assert len(policy.sampler.prompts) <= 1


@pytest.mark.skipif(MAJOR == 1, reason="AgentScope 1.x agents do not inject the time")
def test_the_injected_time_stays_out_of_the_prompt(renderer):
    def prompt_text(formatter):
        policy = scripted(renderer, ["12"])
        _, recorder = run_in_episode(
            lambda: ask(make_agent(agentscope_model(policy, formatter=formatter)), "3 times 4?")
        )
        return renderer.decode(recorder.calls[0].prompt_tokens)

    assert "<current-time>" not in prompt_text(None)
    assert "<current-time>" in prompt_text(TimelineFormatter("solver", keep_time=True))

    from agentscope.message import AssistantMsg, HintBlock

    hint = (
        "<system-reminder>\n<current-time>2026-01-01T00:00:00</current-time>\n<timezone>UTC</timezone>\n"
        "<tool-error>stop</tool-error>\n</system-reminder>"
    )
    (formatted,) = asyncio.run(
        TimelineFormatter("solver").format([AssistantMsg(name="solver", content=[HintBlock(hint=hint)])])
    )
    assert formatted["content"][0]["text"] == "<system-reminder>\n<tool-error>stop</tool-error>\n</system-reminder>"


EXAMPLE = load_example("agentscope_react")


class VariedCalculator(Workflow):
    """The example's agent; rewarded by answer length so that the tiny random model's groups have advantages."""

    trainable_targets = ["solver"]

    async def execute(self, task, tuner):
        model = tuner.as_agentscope_model("solver", target_tag="solver")
        ask_agent = EXAMPLE.ask_agentscope1 if MAJOR == 1 else EXAMPLE.ask_agentscope2
        answer = await ask_agent(model, f"What is {task['a']} times {task['b']}?")
        return WorkflowOutput(reward=float(len(answer)))


def test_a_react_agent_workflow_trains_end_to_end(tiny_model_dir, tmp_path):
    result = tune(
        workflow_func=VariedCalculator,
        train_dataset=DatasetConfig(tasks=EXAMPLE.TASKS[:4], total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4),
        algorithm=AlgorithmConfig(group_size=3, batch_size=2, learning_rate=1e-3, drop_zero_variance_groups=False),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 2
    rows = [row for row in read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl") if "agent" in row]
    assert rows and {row["agent"] for row in rows} == {"solver"} and not any(row["error"] for row in rows)
    assert all(sum(row["loss_mask"]) > 0 and '"name": "multiply"' in row["text"] for row in rows)
    (path,) = result.sampler_paths.values()
    assert any(
        value.abs().sum() > 0
        for key, value in load_file(f"{path}/adapter_model.safetensors").items()
        if "lora_B" in key
    )


# ---------------------------------------------------------------- AgentScope 1.x, in a subprocess


@pytest.mark.skipif(MAJOR == 1 or in_agentscope1_subprocess(), reason="runs from the AgentScope 2.x suite")
def test_agentscope1_runs_this_suite():
    run_on_agentscope1(Path(__file__))


def test_the_installed_agentscope_is_the_one_under_test():
    assert MAJOR == (1 if in_agentscope1_subprocess() else 2)
