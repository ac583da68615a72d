"""Chat models: the one call signature every agent in a workflow uses.

`await model(messages, tools=None, tool_choice=None, **sampling) -> ChatResponse`
takes OpenAI-style messages, tools and `tool_choice` ("auto", "none",
"required" or a named function; see `rollout.tool_choice`). `choices=[...]`,
`regex=` or `response_format=` constrain the reply (`rollout.output_format`):
the local kinds sample only valid replies and record, per sampled token, the
tokens that were allowed, so the learner renormalises exactly as the sampler
did. Three kinds stand behind it:

- `PolicyChatModel` samples from a trainable adapter and records each call
  (prompt tokens, sampled tokens, sampler logprobs) on the episode's recorder
  under its agent name. When the messages continue a conversation the agent
  already had, the prompt is built by extending that conversation's exact
  tokens, so the calls merge into one training sequence.
- `FrozenChatModel` samples from the base model or a frozen adapter (an
  earlier snapshot, saved weights) on the local engine: logged, not trained.
  Both local kinds force a tool call by prefilling the reply with the start of
  one: the prefill is prompt, only the sampled tokens are trained, and the
  reply (prefill included) continues the conversation token for token.
- `OpenAIChatModel` calls any OpenAI-compatible endpoint: logged, not trained.

The local kinds mark the time a call waits on the shared sampler
(`episode_clock.sampler_wait`), so an episode's timeout counts only its share
of that wait.

`model.as_agent(name, role)` gives the same model under another agent name,
so several players can share one policy and still keep separate timelines and
rewards. `model.generate(messages, n=..., recorder=...)` is the general form
behind `__call__`: several replies to one prompt, recorded on an explicit
recorder — what the OpenAI-compatible endpoint uses, since requests that
arrive over HTTP do not run inside the episode's context.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ..clients import SamplingClient
from ..types import ModelInput, OutputConstraint, SamplingParams
from .episode_clock import sampler_wait
from .output_format import schema_of_response_format, take_constraint
from .recorder import Conversation, EpisodeRecorder, current_recorder, installed
from .tool_choice import ToolChoice
from .types import ModelCall

SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_tokens", "stop", "seed"}


@dataclass
class ChatResponse:
    """A model's reply to one call."""

    message: dict
    """The assistant message, OpenAI-style (role, content, tool_calls when any); append it to continue."""
    tokens: list[int] = field(default_factory=list)
    """Sampled token ids (empty for remote endpoints)."""
    logprobs: list[float] = field(default_factory=list)
    """Sampler logprob of each token."""
    stop_reason: str = "stop"
    """'stop' (end of turn or stop sequence) or 'length' (max_tokens reached)."""
    prompt_tokens: int = 0
    """Length of the rendered prompt (0 when the endpoint does not say), for usage accounting."""

    @property
    def content(self) -> str:
        return self.message.get("content") or ""

    @property
    def tool_calls(self) -> list[dict]:
        return self.message.get("tool_calls") or []


class ChatModel(abc.ABC):
    """Anything an agent can talk to."""

    agent: str = "policy"
    role: str | None = None
    trainable: bool = False

    @abc.abstractmethod
    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        **sampling: Any,
    ) -> ChatResponse: ...

    @property
    def renderer(self):
        """The chat renderer behind this model's tokens (to show them as text); None for remote endpoints."""
        return None

    @property
    def constrains_output(self) -> bool:
        """Whether this model samples `choices=` / `regex=` / `response_format=` and strict tool calls exactly."""
        return False

    async def generate(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        n: int = 1,
        recorder: EpisodeRecorder | None = None,
        **sampling: Any,
    ) -> list[ChatResponse]:
        """`n` replies to one prompt, recorded on `recorder` (default: the current episode's, if any)."""
        if tool_choice is not None:  # only then: a model written without the parameter still serves the rest
            sampling = {**sampling, "tool_choice": tool_choice}
        with installed(recorder) if recorder is not None else contextlib.nullcontext():
            return [await self(messages, tools, **sampling) for _ in range(n)]

    def as_agent(self, agent: str, role: str | None = None) -> ChatModel:
        """This model under another agent name (and role), sharing everything else."""
        return dataclasses.replace(self, agent=agent, role=role)


def check_messages(messages: list[dict]) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"messages[{index}] must be a dict with a 'role', got {message!r}")


def normalised_message(message: dict) -> dict:
    """The parts of a message that rendering depends on, so equal messages compare equal."""
    calls = [
        (c["function"]["name"], _json_or_text(c["function"].get("arguments", {})))
        for c in message.get("tool_calls") or []
    ]
    return {
        "role": message["role"],
        "content": message.get("content") or "",
        "tool_calls": calls,
        "tool_call_id": message.get("tool_call_id"),
    }


def _json_or_text(arguments: Any) -> Any:
    # Sampled (e.g. forced) arguments need not be valid JSON; they are compared as text then.
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


@dataclass(eq=False)
class _LocalChatModel(ChatModel):
    sampler: SamplingClient
    """Where to sample from (a live adapter, a snapshot, or the base model)."""
    defaults: dict = field(default_factory=dict)
    """Sampling parameters used when a call gives none."""
    agent: str = "policy"
    """Name the calls are recorded and transcribed under."""
    role: str | None = None
    """The agent's role (target tag); agents of one role share an advantage group."""

    @property
    def renderer(self):
        return self.sampler.get_renderer()

    @property
    def constrains_output(self) -> bool:
        return getattr(self.sampler, "constrains_output", True)

    def _params(self, sampling: dict) -> SamplingParams:
        sampling = dict(sampling)
        constraint = take_constraint(sampling)
        unknown = set(sampling) - SAMPLING_KEYS
        if unknown:
            raise TypeError(
                f"unknown sampling arguments {sorted(unknown)}; accepted: {sorted(SAMPLING_KEYS)} and "
                "choices, regex, response_format"
            )
        return SamplingParams(**{**self.defaults, **sampling}, constraint=constraint)

    def _prompt(self, messages, tools, recorder, conversation_key: str, prefill: str):
        renderer = self.renderer
        tools_key = json.dumps(tools, sort_keys=True) if tools else ""
        normalised = [normalised_message(m) for m in messages]
        found = recorder.continuation(self.agent, conversation_key, normalised, tools_key) if recorder else None
        if found is None:
            prompt = renderer.render(messages, tools=tools, prefill=prefill)
        else:
            conversation, new_messages = found
            prompt = renderer.extend(
                conversation.tokens, messages[len(messages) - len(new_messages) :], prefill=prefill
            )
        return prompt, normalised, tools_key

    def _trained_key(self) -> str | None:
        """The model key calls are recorded for training under; None for a frozen model."""
        return None

    def _frozen_key(self) -> str:
        """Where a frozen model's conversations are kept in an episode: its next call continues the exact tokens of
        its last one (what it sampled, not a re-rendering of the text), as a trained model's does, so a prefix
        cache and a batch's shared prefix match up to the new message."""
        return f"frozen/{id(self.sampler)}"

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        **sampling: Any,
    ) -> ChatResponse:
        return (await self.generate(messages, tools, tool_choice=tool_choice, **sampling))[0]

    async def generate(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        n: int = 1,
        recorder: EpisodeRecorder | None = None,
        **sampling: Any,
    ) -> list[ChatResponse]:
        check_messages(messages)
        choice = ToolChoice.of(tool_choice, tools)
        recorder = recorder if recorder is not None else current_recorder()
        model_key = self._trained_key()
        conversation_key = model_key or self._frozen_key()
        params = self._params(sampling)
        if params.seed is None and recorder is not None and (seed := recorder.call_seed(self.agent)) is not None:
            params = params.model_copy(update={"seed": seed})
        if params.constraint is not None and choice.forces_call:
            raise ValueError(
                f"a reply constrained by {params.constraint.describe()} cannot also be a forced tool call "
                f"(tool_choice {tool_choice!r})"
            )
        free_text = (
            choice.mode == "none" or params.constraint is not None
        )  # a constrained reply is its text, never a tool call
        renderer = self.renderer
        if choice.arguments_schema is not None and (choice.strict or self.constrains_output):  # else sampled freely
            params = params.model_copy(
                update={
                    "constraint": OutputConstraint(
                        json_schema=choice.arguments_schema, closing=renderer.tool_call_closing(choice.function)
                    )
                }
            )
        prefill = renderer.tool_call_prefill(choice.function) if choice.forces_call else ""
        prompt, normalised, tools_key = self._prompt(messages, tools, recorder, conversation_key, prefill)
        with sampler_wait():  # the episode's clock counts only its share of the time the shared sampler takes
            response = await self.sampler.sample(ModelInput.from_ints(prompt), n, params)
        if recorder is not None and self.role is not None:
            recorder.roles[self.agent] = self.role
        replies = []
        for sequence in response.sequences:
            tokens, logprobs = (
                list(sequence.tokens),
                list(sequence.logprobs or []),
            )  # the recorded copy; replies get their own
            parsed = renderer.parse_response(
                sequence.tokens, prefill=prefill, forced_tool=choice.function, tool_calls=not free_text
            )
            message = _cut_at_stop_string(parsed, params.stop)
            if recorder is not None:
                # The prefill ends the prompt: the conversation goes on after prompt + sampled tokens.
                conversation = Conversation([*normalised, normalised_message(message)], prompt + tokens, tools_key)
                if model_key is not None:
                    call = ModelCall(
                        self.agent,
                        model_key,
                        prompt,
                        tokens,
                        logprobs,
                        list(sequence.allowed_tokens or []),
                        list(sequence.behaviour_logprobs or []),
                    )
                    recorder.record_call(call, conversation)
                else:
                    recorder.record_conversation(self.agent, conversation_key, prompt, conversation)
                recorder.add_transcript(
                    self.agent,
                    {
                        "messages": list(messages),
                        "response": message,
                        "trainable": model_key is not None,
                        "prompt_tokens": len(prompt),
                        "completion_tokens": len(tokens),
                    },
                )
            replies.append(
                ChatResponse(
                    message=message,
                    tokens=list(tokens),
                    logprobs=list(logprobs),
                    stop_reason=sequence.stop_reason,
                    prompt_tokens=len(prompt),
                )
            )
        return replies


def _cut_at_stop_string(message: dict, stop) -> dict:
    """The reply without the stop string that ended it (OpenAI semantics); the recorded tokens keep it."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str)]
    content = message.get("content") or ""
    found = [content.find(s) for s in stops if s and s in content]
    return {**message, "content": content[: min(found)]} if found else message


@dataclass(eq=False)
class PolicyChatModel(_LocalChatModel):
    """A trainable model: samples from the policy adapter and records every call."""

    model_key: str = "policy"
    """Which trainable model (adapter) this is, when several are trained at once."""
    temperature_floor: float = 0.0
    """Calls sample at no lower temperature than this (training rollouts, `algorithm.rollout_temperature_floor`); 0:
    as asked."""
    exploration: float = 0.0
    """Constrained calls draw this share of each token uniformly over the allowed ones (training rollouts,
    `algorithm.exploration`); 0: from the model alone."""
    trainable = True

    def _trained_key(self) -> str | None:
        return self.model_key

    def _params(self, sampling: dict) -> SamplingParams:
        params = super()._params(sampling)
        if params.temperature < self.temperature_floor:
            params = params.model_copy(update={"temperature": self.temperature_floor})
        if self.exploration:
            params = params.model_copy(update={"exploration": self.exploration})
        return params


@dataclass(eq=False)
class FrozenChatModel(_LocalChatModel):
    """A frozen local model (base model or a frozen adapter): transcribed, never trained."""


@dataclass(eq=False)
class OpenAIChatModel(ChatModel):
    """Any OpenAI-compatible chat endpoint (a remote API, vLLM, `sparring serve`): transcribed, never trained."""

    model: str
    """Model name sent to the endpoint."""
    base_url: str
    """Endpoint base URL, e.g. http://127.0.0.1:8000/v1."""
    api_key: str = "EMPTY"
    """Key sent as the bearer token."""
    defaults: dict = field(default_factory=dict)
    """Sampling parameters used when a call gives none."""
    agent: str = "auxiliary"
    """Name the calls are transcribed under."""
    role: str | None = None
    """The agent's role, for transcripts."""

    def client(self):
        """This model's `openai.AsyncOpenAI`, made on the first call and kept. An async client's connections belong
        to the event loop that opened them, so a call on another loop (a fresh `asyncio.run`) makes a new one."""
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        kept = self.__dict__.get("_client_on_loop")
        if kept is None or kept[1] is not loop:
            kept = (AsyncOpenAI(base_url=self.base_url, api_key=self.api_key), loop)
            self.__dict__["_client_on_loop"] = kept
        return kept[0]

    def __getstate__(self) -> dict:
        """Pickled (a runner shipping the model to a worker) without its client, which the worker makes anew."""
        return {key: value for key, value in self.__dict__.items() if key != "_client_on_loop"}

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        **sampling: Any,
    ) -> ChatResponse:
        check_messages(messages)
        client = self.client()
        options = {**self.defaults, **sampling}
        options.pop("top_k", None)  # not part of the OpenAI API
        # Constraints in the spellings an OpenAI-compatible server takes: response_format, and vLLM's guided_*
        # (extra body).
        guided = {
            name: options.pop(key)
            for key, name in (("choices", "guided_choice"), ("regex", "guided_regex"))
            if key in options
        }
        if guided:
            options["extra_body"] = {**options.get("extra_body", {}), **guided}
        if isinstance(options.get("response_format"), type):  # a pydantic model class: its schema, in OpenAI's shape
            model_class = options["response_format"]
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": model_class.__name__, "schema": schema_of_response_format(model_class)},
            }
        if tools:
            options["tools"] = tools
        if tool_choice is not None:
            options["tool_choice"] = tool_choice
        completion = await client.chat.completions.create(model=self.model, messages=messages, **options)
        choice = completion.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        recorder = current_recorder()
        if recorder is not None:
            usage = completion.usage
            recorder.add_transcript(
                self.agent,
                {
                    "messages": list(messages),
                    "response": message,
                    "trainable": False,
                    "prompt_tokens": usage.prompt_tokens if usage else 0,
                    "completion_tokens": usage.completion_tokens if usage else 0,
                },
            )
        return ChatResponse(
            message=message,
            stop_reason="length" if choice.finish_reason == "length" else "stop",
            prompt_tokens=completion.usage.prompt_tokens if completion.usage else 0,
        )
