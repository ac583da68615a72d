"""Sessions of the Tinker wire protocol, and the ownership every request is checked against.

A session (`create_session`) groups what one `tinker.ServiceClient` made; it lives while the SDK heartbeats, and
finishing or abandoning it releases its adapters. `Session` is its record, `TrainingModel` the record of a model it
owns (the lookups here return it); `Sessions` is the part of
`TinkerService` that creates, finds, heartbeats, sweeps and ends them.

Isolation lives here: the protocol names a session only when something is created in it; every later request names
just the model, sampler or request it acts on. So those ids are the credentials: the session id is a random 128-bit
token, a model id embeds it (the SDK builds `<session>:train:<n>` itself), and everything else a session is handed
is a random token that reveals no other id. An id nobody was handed is a 404 (`Sessions.model`, `Sessions.sampler`),
and the end of a session (finished, or silent for `session_idle_s`) releases its models and samplers and cancels its
unfinished requests.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from . import wire
from .futures import FutureStore
from .lanes import ModelLane
from .sampling import Sampler
from .wire import WireError

logger = logging.getLogger(__name__)


@dataclass
class Session:
    """What one SDK ServiceClient created."""

    last_seen: float
    """Monotonic time of the last heartbeat or request."""
    heartbeat_at: float | None = None
    """Monotonic time of the last heartbeat; None for a client that never sends them."""
    models: list[str] = field(default_factory=list)
    """Its training model ids."""
    samplers: list[str] = field(default_factory=list)
    """Its sampling session ids."""
    sampler_ids: dict[int, str] = field(default_factory=dict)
    """sampling_session_seq_id -> sampler id (a retried create gets the same sampler)."""


@dataclass
class TrainingModel:
    """A training model as the wire sees it."""

    lane: ModelLane
    """Its requests, in order; `lane.client` resolves to the TrainingClient."""
    session_id: str
    """The owning session."""
    served_name: str
    """The base model's name as the client asked for it (what `get_info` answers)."""
    rank: int
    """LoRA rank."""
    weights_key: str
    """Directory of its checkpoints under the base dir (the first part of their tinker:// paths); not its id."""
    creation_request: str = ""
    """Request id of its creation (answered again to a retried create)."""
    snapshots: deque = field(default_factory=deque)
    """Ids of its snapshot samplers, oldest first (the oldest are released past the cap)."""


class Sessions:
    """The sessions part of `TinkerService`: its sessions, and the lookups that check a model's or a sampler's
    session is still there (each counts as the session's activity)."""

    store: FutureStore
    sessions: dict[str, Session]
    models: dict[str, TrainingModel]
    samplers: dict[str, Sampler]
    session_idle_s: float
    abandon_s: float
    _release_model: Callable[[str], None]
    """`TrainingModels._release_model`: an ended session's models are released with it."""

    def session(self, session_id: str) -> Session:
        self.sweep()
        session = self.sessions.get(session_id)
        if session is None:
            raise WireError(
                404, f"unknown session_id {session_id!r} (the server may have restarted; create a new ServiceClient)"
            )
        session.last_seen = time.monotonic()
        return session

    def model(self, model_id: str) -> TrainingModel:
        return self._owned(self.models, model_id, "model_id")

    def sampler(self, sampler_id: str) -> Sampler:
        return self._owned(self.samplers, sampler_id, "sampling_session_id")

    def _owned(self, table: dict, key: str, field_name: str):
        """table[key], whose session counts as active; 404 naming the field if there is none."""
        item = table.get(key)
        if item is None:
            raise WireError(404, f"unknown {field_name} {key!r}")
        self.session(item.session_id)
        return item

    def create_session(self, request: wire.CreateSessionRequest) -> dict:
        session_id = secrets.token_hex(16)
        self.sessions[session_id] = Session(last_seen=time.monotonic())
        logger.info("session %s created (sdk %s)", session_id, request.sdk_version)
        return {"type": "create_session", "session_id": session_id}

    def finish_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        for model_id in session.models:
            self._release_model(model_id)
        for sampler_id in session.samplers:
            self.samplers.pop(sampler_id, None)
        cancelled = self.store.cancel_owned(session_id)
        logger.info(
            "session %s finished; %d models released, %d unfinished requests cancelled",
            session_id,
            len(session.models),
            cancelled,
        )

    def heartbeat(self, session_id: str) -> None:
        self.session(session_id).heartbeat_at = time.monotonic()

    def sweep(self) -> None:
        """Release sessions silent for `session_idle_s`; cancel the requests of heartbeating clients gone quiet for
        `abandon_s`.

        The SDK heartbeats every 10 s and calls a session lost after 120 s without one: its process is gone, and
        nobody will fetch what it asked for. (A client that never heartbeats is judged by `session_idle_s` alone.)
        """
        now = time.monotonic()
        for session_id, session in list(self.sessions.items()):
            if now - session.last_seen > self.session_idle_s:
                logger.warning("session %s sent nothing for %.0f s; releasing it", session_id, now - session.last_seen)
                self.finish_session(session_id)
            elif session.heartbeat_at is not None and now - session.heartbeat_at > self.abandon_s:
                silent, session.heartbeat_at = now - session.heartbeat_at, None
                cancelled = self.store.cancel_owned(session_id)
                logger.warning(
                    "session %s sent no heartbeat for %.0f s; %d unfinished requests cancelled",
                    session_id,
                    silent,
                    cancelled,
                )
