"""Futures of the Tinker wire protocol: every long operation answers with a request id.

A POST that starts work (create_model, forward_backward, asample, ...) gets
`{"request_id": ...}` at once; the client then polls `retrieve_future` until
the result is there. `FutureStore` keeps one asyncio task per request id.
`wait` long-polls: it returns as soon as the task finishes, or after
`poll_s` with nothing (the route then answers `try_again`), so a client
sees a result within milliseconds of it existing without hammering the
server. Results are kept until fetched and for `fetched_ttl_s` after (a
client whose reply got lost asks again); results never fetched expire after
`unfetched_ttl_s`. Waiting never cancels the work; `cancel` does, and so
does the end of the session that owns the request (`cancel_owned`): work
nobody will fetch is not computed. Request ids are random, so no client can
name another's request by counting from its own. `drain` is the stopping
server's last word: finish what runs within a deadline, cancel the rest.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    task: asyncio.Task
    """The work; its result is the wire result."""
    kind: str
    """What the request was (logged)."""
    owner: str | None
    """The session whose request it is (its end cancels the work); None for session-less work."""
    done_at: float | None = None
    """When the task finished."""
    fetched_at: float | None = None
    """When the client first fetched the finished result."""


@dataclass
class FutureStore:
    """Request id -> running or finished work, with long-poll waiting, cancellation and expiry."""

    poll_s: float = 20.0
    """Longest a retrieve_future call waits before answering try_again (the SDK's read timeout is 45 s)."""
    fetched_ttl_s: float = 600.0
    """How long a fetched result stays retrievable."""
    unfetched_ttl_s: float = 24 * 3600.0
    """How long a finished result nobody fetched is kept."""
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _last_sweep: float = 0.0

    def start(self, work: Awaitable[Any], kind: str, owner: str | None = None) -> str:
        """Run `work` (on the running loop) under a new request id, owned by session `owner`."""
        self._sweep()
        request_id = f"req-{secrets.token_hex(16)}"
        task = asyncio.ensure_future(work)
        entry = self._entries[request_id] = _Entry(task=task, kind=kind, owner=owner)

        def finished(done: asyncio.Task) -> None:
            entry.done_at = time.monotonic()
            if not done.cancelled() and done.exception() is not None:
                logger.info("%s %s failed: %s", kind, request_id, done.exception())

        task.add_done_callback(finished)
        return request_id

    def known(self, request_id: str) -> bool:
        return request_id in self._entries

    async def wait(self, request_id: str, timeout_s: float | None = None) -> asyncio.Task | None:
        """The finished task, or None if it is still running after the wait."""
        entry = self._entries.get(request_id)
        if entry is None:
            raise KeyError(request_id)
        # asyncio.wait neither cancels the task on timeout nor raises its error.
        done, _ = await asyncio.wait({entry.task}, timeout=self.poll_s if timeout_s is None else timeout_s)
        return entry.task if done else None

    def mark_fetched(self, request_id: str) -> None:
        entry = self._entries.get(request_id)
        if entry is not None and entry.fetched_at is None:
            entry.fetched_at = time.monotonic()

    def cancel(self, request_id: str) -> None:
        entry = self._entries.get(request_id)
        if entry is not None and not entry.task.done():
            entry.task.cancel()

    def cancel_owned(self, owner: str) -> int:
        """Cancel every unfinished request of session `owner`; how many there were."""
        running = [entry.task for entry in self._entries.values() if entry.owner == owner and not entry.task.done()]
        for task in running:
            task.cancel()
        return len(running)

    async def drain(self, timeout_s: float) -> int:
        """Let running work finish for up to `timeout_s`, then cancel what is left; how many were cancelled."""
        running = {entry.task for entry in self._entries.values() if not entry.task.done()}
        if not running:
            return 0
        _, left = await asyncio.wait(running, timeout=max(timeout_s, 0.0))
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=1.0)
        return len(left)

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < 30.0:
            return
        self._last_sweep = now
        expired = [
            request_id
            for request_id, entry in self._entries.items()
            if (entry.fetched_at is not None and now - entry.fetched_at > self.fetched_ttl_s)
            or (entry.done_at is not None and now - entry.done_at > self.unfetched_ttl_s)
        ]
        for request_id in expired:
            del self._entries[request_id]
