"""Chat models: the one call signature every agent in a workflow uses.

`await model(messages, tools=None, **sampling) -> ChatResponse` takes
OpenAI-style messages. Three kinds stand behind it:

- `PolicyChatModel` samples from a trainable adapter and records each call
  (prompt tokens, sampled tokens, sampler logprobs) on the episode's recorder
  under its agent name. When the messages continue a conversation the agent
  already had, the prompt is built by extending that conversation's exact
  tokens, so the calls merge into one training sequence.
- `FrozenChatModel` samples from the base model or a frozen adapter (an
  earlier snapshot, saved weights) on the local engine: logged, not trained.
- `OpenAIChatModel` calls any OpenAI-compatible endpoint: logged, not trained.

`model.as_agent(name, role)` gives the same model under another agent name,
so several players can share one policy and still keep separate timelines and
rewards.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ..training import SamplingClient
from ..types import ModelInput, SamplingParams
from .recorder import Conversation, current_recorder
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
    async def __call__(self, messages: list[dict], tools: list[dict] | None = None, **sampling: Any) -> ChatResponse: ...

    def as_agent(self, agent: str, role: str | None = None) -> ChatModel:
        """This model under another agent name (and role), sharing everything else."""
        return dataclasses.replace(self, agent=agent, role=role)


def check_messages(messages: list[dict]) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"messages[{index}] must be a dict with a 'role', got {message!r}")


def _normalised(message: dict) -> dict:
    """The parts of a message that rendering depends on, so equal messages compare equal."""
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]) if isinstance(c["function"]["arguments"], str) else c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return {"role": message["role"], "content": message.get("content") or "", "tool_calls": calls, "tool_call_id": message.get("tool_call_id")}


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

    def _params(self, sampling: dict) -> SamplingParams:
        unknown = set(sampling) - SAMPLING_KEYS
        if unknown:
            raise TypeError(f"unknown sampling arguments {sorted(unknown)}; accepted: {sorted(SAMPLING_KEYS)}")
        return SamplingParams(**{**self.defaults, **sampling})

    def _prompt(self, messages, tools, recorder, model_key):
        renderer = self.sampler.get_renderer()
        tools_key = json.dumps(tools, sort_keys=True) if tools else ""
        normalised = [_normalised(m) for m in messages]
        found = recorder.continuation(self.agent, model_key, normalised, tools_key) if recorder and model_key else None
        if found is None:
            prompt = renderer.render(messages, tools=tools)
        else:
            conversation, new_messages = found
            prompt = renderer.extend(conversation.tokens, messages[len(messages) - len(new_messages) :])
        return prompt, normalised, tools_key

    async def _sample(self, messages, tools, sampling, model_key: str | None) -> ChatResponse:
        check_messages(messages)
        recorder = current_recorder()
        prompt, normalised, tools_key = self._prompt(messages, tools, recorder, model_key)
        response = await self.sampler.sample(ModelInput.from_ints(prompt), 1, self._params(sampling))
        sequence = response.sequences[0]
        message = self.sampler.get_renderer().parse_response(sequence.tokens)
        if recorder is not None:
            if model_key is not None:
                call = ModelCall(self.agent, model_key, prompt, list(sequence.tokens), list(sequence.logprobs or []))
                recorder.record_call(call, Conversation([*normalised, _normalised(message)], prompt + list(sequence.tokens), tools_key))
            if self.role is not None:
                recorder.roles[self.agent] = self.role
            recorder.add_transcript(
                self.agent,
                {"messages": messages, "response": message, "trainable": model_key is not None, "prompt_tokens": len(prompt), "completion_tokens": len(sequence.tokens)},
            )
        return ChatResponse(message=message, tokens=list(sequence.tokens), logprobs=list(sequence.logprobs or []), stop_reason=sequence.stop_reason)


@dataclass(eq=False)
class PolicyChatModel(_LocalChatModel):
    """A trainable model: samples from the policy adapter and records every call."""

    model_key: str = "policy"
    """Which trainable model (adapter) this is, when several are trained at once."""
    trainable = True

    async def __call__(self, messages: list[dict], tools: list[dict] | None = None, **sampling: Any) -> ChatResponse:
        return await self._sample(messages, tools, sampling, self.model_key)


@dataclass(eq=False)
class FrozenChatModel(_LocalChatModel):
    """A frozen local model (base model or a frozen adapter): transcribed, never trained."""

    async def __call__(self, messages: list[dict], tools: list[dict] | None = None, **sampling: Any) -> ChatResponse:
        return await self._sample(messages, tools, sampling, None)


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

    async def __call__(self, messages: list[dict], tools: list[dict] | None = None, **sampling: Any) -> ChatResponse:
        from openai import AsyncOpenAI

        check_messages(messages)
        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key)
        options = {**self.defaults, **sampling}
        options.pop("top_k", None)  # not part of the OpenAI API
        if tools:
            options["tools"] = tools
        completion = await client.chat.completions.create(model=self.model, messages=messages, **options)
        choice = completion.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        recorder = current_recorder()
        if recorder is not None:
            usage = completion.usage
            recorder.add_transcript(
                self.agent,
                {"messages": messages, "response": message, "trainable": False, "prompt_tokens": usage.prompt_tokens if usage else 0, "completion_tokens": usage.completion_tokens if usage else 0},
            )
        return ChatResponse(message=message, stop_reason="length" if choice.finish_reason == "length" else "stop")
