"""Per-model request ordering for the Tinker wire protocol.

The SDK numbers every request to one training model (`seq_id` 1, 2, 3, ...)
and may send them concurrently — the chunks of a large `forward_backward`
travel in parallel, the first chunk last — so they can arrive in any order.
A `ModelLane` hands them to the model's `TrainingClient` strictly in
`seq_id` order (the engine then runs one client's calls in submission
order), after the client exists: requests may arrive while the model is
still being created. A retried request (same `seq_id`) is recognised and
answered with the first attempt's request id. A number that never arrives
(the client died mid-send) holds the lane for at most `gap_s`, then the lane
moves on. Requests without a `seq_id` run in arrival order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...clients import TrainingClient

logger = logging.getLogger(__name__)

Start = Callable[[TrainingClient], Awaitable[Any]]


RECENT = 4096
"""How many request ids per model or sampler are kept to recognise retries (a retry comes within minutes)."""


def remember_recent(mapping: dict, key, value) -> None:
    """mapping[key] = value, forgetting the oldest half once it holds more than RECENT entries."""
    mapping[key] = value
    if len(mapping) > RECENT:
        for old in list(mapping)[: RECENT // 2]:
            del mapping[old]


class LaneClosed(RuntimeError):
    """The model a request was for is gone: unloaded, or its creation failed."""


@dataclass
class _Op:
    start: Start
    """Submits the work to the client; returns a handle (usually an APIFuture) once submitted."""
    submitted: asyncio.Future
    """Resolves to the handle, or to the error start raised."""


class ModelLane:
    """Submits one model's requests to its TrainingClient in seq_id order."""

    def __init__(self, model_id: str, client: Awaitable[TrainingClient], gap_s: float = 120.0):
        self.model_id = model_id
        self.client = asyncio.ensure_future(client)
        self.gap_s = gap_s
        self._next_seq = 1
        self._waiting: dict[int, _Op] = {}
        self._skipped: set[int] = set()
        self._unsequenced: collections.deque[_Op] = collections.deque()
        self._request_ids: dict[int, str] = {}
        self._wakeup = asyncio.Event()
        self._runner = asyncio.ensure_future(self._run())

    def request_id(self, seq_id: int) -> str | None:
        """The request id already given to this seq_id (a retried request), if any."""
        return self._request_ids.get(seq_id)

    def remember(self, seq_id: int | None, request_id: str) -> None:
        if seq_id is not None:
            remember_recent(self._request_ids, seq_id, request_id)

    def submit(self, seq_id: int | None, start: Start) -> asyncio.Future:
        """Queue `start` at position seq_id; the returned future resolves once it has been submitted."""
        op = _Op(start, asyncio.get_running_loop().create_future())
        if seq_id is None:
            self._unsequenced.append(op)
        elif seq_id < self._next_seq or seq_id in self._skipped:
            logger.warning(
                "model %s: request %d arrived after the lane moved past it; running it now", self.model_id, seq_id
            )
            self._unsequenced.append(op)
        else:
            self._waiting[seq_id] = op
        self._wakeup.set()
        return op.submitted

    def skip(self, seq_id: int | None) -> None:
        """Mark seq_id as used by a request that was rejected before it reached the lane."""
        if seq_id is not None and seq_id >= self._next_seq:
            self._skipped.add(seq_id)
            self._wakeup.set()

    def close(self) -> None:
        self._runner.cancel()
        for op in [*self._waiting.values(), *self._unsequenced]:
            if not op.submitted.done():
                op.submitted.set_exception(LaneClosed(f"model {self.model_id} was unloaded"))

    async def _run(self) -> None:
        try:
            client, failure = await self.client, None
        except Exception as error:  # noqa: BLE001 - every request of the lane reports it
            client, failure = None, error
        while True:
            op = await self._next()
            if failure is not None:
                op.submitted.set_exception(LaneClosed(f"model {self.model_id} could not be created: {failure}"))
                continue
            try:
                handle = await op.start(client)
            except Exception as error:  # noqa: BLE001 - this request's result is the error
                op.submitted.set_exception(error)
            else:
                op.submitted.set_result(handle)

    async def _next(self) -> _Op:
        gap_since: tuple[int, float] | None = None
        while True:
            if self._next_seq in self._waiting:
                self._next_seq += 1
                return self._waiting.pop(self._next_seq - 1)
            if self._next_seq in self._skipped:
                self._skipped.discard(self._next_seq)
                self._next_seq += 1
                continue
            if self._unsequenced:
                return self._unsequenced.popleft()
            self._wakeup.clear()
            if not self._waiting:
                await self._wakeup.wait()
                continue
            now = asyncio.get_running_loop().time()
            if gap_since is None or gap_since[0] != self._next_seq:
                gap_since = (self._next_seq, now)
            remaining = gap_since[1] + self.gap_s - now
            try:
                await asyncio.wait_for(self._wakeup.wait(), max(remaining, 0.0))
            except asyncio.TimeoutError:
                missing, self._next_seq = self._next_seq, min(self._waiting)
                logger.warning(
                    "model %s: request %d never arrived within %.0f s; continuing with %d",
                    self.model_id,
                    missing,
                    self.gap_s,
                    self._next_seq,
                )
