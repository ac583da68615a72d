"""Episode keys: API keys that carry one agent of one episode.

An agent built on any framework (raw HTTP, the `openai` SDK, LangGraph) talks
to sparring's OpenAI-compatible endpoint with a base URL and an API key. The
key is the only thing that ties a request to an episode, so it is the unit of
trust: an `EpisodeKeys` registry maps each key to one `EpisodeBinding` (the
routed chat model and the episode's recorder), and nothing in a request can
point it elsewhere. Keys are 256 random bits, looked up exactly, and revoked
when the episode's recorder closes, so a key from one episode can never write
into another, and a key outlives its episode only as a 401.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...rollout import ChatModel, EpisodeRecorder
from .responses_body import ResponseStore

EPISODE_KEY_PREFIX = "sk-sparring-episode-"


@dataclass(frozen=True)
class EpisodeBinding:
    """What one episode key routes to."""

    chat_model: ChatModel
    """The agent's model, already routed (trainable policy or debug model) and named after the agent."""
    recorder: EpisodeRecorder
    """The episode's recorder: every call made with the key is recorded here."""
    responses: ResponseStore = field(default_factory=ResponseStore, compare=False)
    """The Responses API's replies given with the key, which `previous_response_id` continues (dropped with the key)."""


@dataclass(frozen=True)
class EpisodeEndpoint:
    """Where one agent of one episode sends OpenAI-compatible requests; unpacks as `(base_url, api_key)`."""

    base_url: str
    """Base URL of the OpenAI-compatible API, ending in /v1."""
    api_key: str
    """The episode key: send it as the bearer token. It stops working when the episode ends."""
    model: str
    """A name to send as `model` (the agent's; with an episode key any name is accepted)."""

    def __iter__(self) -> Iterator[str]:
        return iter((self.base_url, self.api_key))


class EpisodeKeys:
    """The live episode keys of one process, each bound to one agent of one episode."""

    def __init__(self) -> None:
        self._bindings: dict[str, EpisodeBinding] = {}
        self._lock = threading.Lock()

    def issue(self, chat_model: ChatModel, recorder: EpisodeRecorder) -> str:
        """A new key for `chat_model` in the episode of `recorder`, revoked when that episode ends."""
        key = EPISODE_KEY_PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._bindings[key] = EpisodeBinding(chat_model, recorder)
        recorder.on_close(lambda: self.revoke(key))
        return key

    def lookup(self, key: str) -> EpisodeBinding | None:
        """The binding of a live key; None for an unknown, revoked or expired one."""
        with self._lock:
            binding = self._bindings.get(key)
        return None if binding is None or binding.recorder.closed else binding

    def revoke(self, key: str) -> None:
        with self._lock:
            self._bindings.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._bindings)
