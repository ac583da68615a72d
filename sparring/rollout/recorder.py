"""The episode recorder: what every model call of one episode leaves behind.

An `EpisodeRecorder` is installed in a context variable for the duration of
one episode, so chat models find it without being passed it, and episodes
running concurrently in one event loop never see each other's calls. It keeps
trainable calls (`ModelCall`, exact tokens and sampler logprobs), the count
of calls a scripted baseline answered in the trainable slot, readable
transcripts of every call (trainable or frozen), and each agent's open
conversations — the messages it has seen and the exact tokens they were
rendered and sampled as — so that a later call that continues a conversation
extends those tokens instead of rendering them again. It also numbers each
agent's calls to seed them (`call_seed`, `sampling_seeds.py`).

Calls may also arrive from another thread (an agent talking HTTP to the
episode's OpenAI-compatible endpoint is served on the server's thread), so
the recorder locks its own state. When the episode ends, `recording` closes
the recorder: later calls are refused (`EpisodeClosedError`) and whatever
was tied to the episode (its endpoint keys) is released.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .sampling_seeds import derived_seed
from .types import ModelCall


class EpisodeClosedError(RuntimeError):
    """A model call finished after its episode had ended; it is not recorded."""


_CURRENT: contextvars.ContextVar[EpisodeRecorder | None] = contextvars.ContextVar(
    "sparring_episode_recorder", default=None
)


@dataclass
class Conversation:
    """An agent's conversation so far, as messages and as the exact tokens behind them."""

    messages: list[dict]
    """Messages including the last assistant reply, normalised for comparison."""
    tokens: list[int]
    """Prompt plus sampled completion of the last call."""
    tools_key: str
    """The tools the prompt was rendered with (a conversation only continues under the same tools)."""


@dataclass
class EpisodeRecorder:
    """Everything the model calls of one episode recorded."""

    calls: list[ModelCall] = field(default_factory=list)
    """Trainable calls in the order they finished."""
    transcripts: dict[str, list[dict]] = field(default_factory=dict)
    """Per agent: messages, reply, whether it was trainable, token counts."""
    roles: dict[str, str] = field(default_factory=dict)
    """Agent name -> role (target tag), for per-role advantage groups."""
    conversations: dict[tuple[str, str], list[Conversation]] = field(default_factory=dict)
    """Per (agent, model): the conversations a new call may continue (model: a trained model's key, or a frozen
    one's `frozen/...`)."""
    scripted_calls: Counter[str] = field(default_factory=Counter)
    """Per agent: calls a scripted policy answered in the trainable slot (a baseline); rewarded like trainable
    calls, never trained."""
    sampling_seed: int | None = None
    """Where the seeds of the episode's unseeded calls come from (`call_seed`), so its tokens do not depend on when
    its calls reach the sampler beside other episodes'; None: the sampler's own stream, in arrival order."""
    closed: bool = False
    """True once the episode has ended: no more calls are recorded."""
    _calls_seeded: Counter[str] = field(default_factory=Counter, init=False, repr=False, compare=False)
    _on_close: list[Callable[[], None]] = field(default_factory=list, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def record_call(self, call: ModelCall, conversation: Conversation) -> None:
        with self._lock:
            self._check_open()
            self.calls.append(call)
            self._keep_open(call.agent, call.model, call.prompt_tokens, conversation)

    def record_conversation(self, agent: str, model: str, prompt_tokens: list[int], conversation: Conversation) -> None:
        """Keep a frozen model's conversation open for its next call (its exact tokens), recording no trainable call."""
        with self._lock:
            self._check_open()
            self._keep_open(agent, model, prompt_tokens, conversation)

    def _keep_open(self, agent: str, model: str, prompt_tokens: list[int], conversation: Conversation) -> None:
        open_ones = self.conversations.setdefault((agent, model), [])
        # The continued conversation is replaced by its extension; others stay open.
        open_ones[:] = [c for c in open_ones if not _is_prefix(c.tokens, prompt_tokens)]
        open_ones.append(conversation)

    def continuation(
        self, agent: str, model: str, messages: list[dict], tools_key: str
    ) -> tuple[Conversation, list[dict]] | None:
        """The longest open conversation that `messages` continue, and the messages that are new."""
        best = None
        with self._lock:
            for conversation in self.conversations.get((agent, model), []):
                seen = conversation.messages
                if conversation.tools_key == tools_key and len(messages) > len(seen) and messages[: len(seen)] == seen:
                    if best is None or len(seen) > len(best.messages):
                        best = conversation
        return None if best is None else (best, messages[len(best.messages) :])

    def call_seed(self, agent: str) -> int | None:
        """The seed of `agent`'s next call: from the episode's seed, the agent and the call's number (None without a
        seed)."""
        if self.sampling_seed is None:
            return None
        with self._lock:
            number = self._calls_seeded[agent]
            self._calls_seeded[agent] += 1
        return derived_seed(self.sampling_seed, agent, number)

    def record_scripted_call(self, agent: str, role: str | None, entry: dict) -> None:
        """Count a call a scripted policy answered for `agent` in the trainable slot, and transcribe it."""
        with self._lock:
            self._check_open()
            self.scripted_calls[agent] += 1
            if role is not None:
                self.roles[agent] = role
            self.transcripts.setdefault(agent, []).append(entry)

    def policy_calls(self) -> Counter[str]:
        """Calls per agent made in the trainable slot: sampled from a trainable model or answered by a scripted
        baseline."""
        with self._lock:
            return Counter(call.agent for call in self.calls) + self.scripted_calls

    def add_transcript(self, agent: str, entry: dict) -> None:
        with self._lock:
            self._check_open()
            self.transcripts.setdefault(agent, []).append(entry)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the episode ends (at once if it already has)."""
        with self._lock:
            if not self.closed:
                self._on_close.append(callback)
                return
        callback()

    def close(self) -> None:
        """End the episode: refuse later calls and run the on-close callbacks."""
        with self._lock:
            self.closed = True
            callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()

    def _check_open(self) -> None:
        if self.closed:
            raise EpisodeClosedError("the episode has ended; its recorder takes no more calls")


def _is_prefix(prefix: list[int], tokens: list[int]) -> bool:
    return len(prefix) <= len(tokens) and tokens[: len(prefix)] == prefix


def current_recorder() -> EpisodeRecorder | None:
    return _CURRENT.get()


@contextlib.contextmanager
def installed(recorder: EpisodeRecorder):
    """Make `recorder` the current one for the code (and tasks it creates) inside the block."""
    token = _CURRENT.set(recorder)
    try:
        yield recorder
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def recording(recorder: EpisodeRecorder):
    """Run one episode on `recorder`: installed inside the block, closed when the block ends."""
    try:
        with installed(recorder):
            yield recorder
    finally:
        recorder.close()
