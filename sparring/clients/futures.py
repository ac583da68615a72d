"""Futures in the shapes the Tinker SDK (and code written for it) expects.

`APIFuture` wraps a submitted operation: `.result()` blocks, `await
fut.result_async()` and `await fut` suspend. `Submitted` is what the older
`*_async` spellings return: the call is already queued when the method
returns, and the object is both awaitable (giving the `APIFuture`, as
`fut = await client.forward_backward_async(...)` expects) and has
`result_async()` itself (as `client.forward_backward_async(...)` followed by
`await handle.result_async()` expects).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class APIFuture(Generic[T]):
    """The eventual result of one submitted operation."""

    def __init__(self, future: Future):
        self._future = future

    @classmethod
    def completed(cls, value: T) -> APIFuture[T]:
        future: Future = Future()
        future.set_result(value)
        return cls(future)

    def result(self, timeout: float | None = None) -> T:
        return self._future.result(timeout)

    async def result_async(self, timeout: float | None = None) -> T:
        return await asyncio.wait_for(asyncio.wrap_future(self._future), timeout)

    def done(self) -> bool:
        return self._future.done()

    def __await__(self):
        return self.result_async().__await__()

    def then(self, transform: Callable[[T], U]) -> APIFuture[U]:
        """A future of transform(result), computed when this one completes."""
        chained: Future = Future()

        def finish(source: Future) -> None:
            try:
                chained.set_result(transform(source.result()))
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the chained future
                chained.set_exception(error)

        self._future.add_done_callback(finish)
        return APIFuture(chained)

    def join(self, other: APIFuture, combine: Callable[[T, object], U]) -> APIFuture[U]:
        """A future of combine(this result, other's result), computed when both complete (never blocking a callback)."""
        chained: Future = Future()
        lock = threading.Lock()

        def finish(_: Future) -> None:
            with lock:  # the two callbacks may run on two threads at once
                if chained.done() or not (self._future.done() and other._future.done()):
                    return
                try:
                    chained.set_result(combine(self._future.result(), other._future.result()))
                except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the chained future
                    chained.set_exception(error)

        self._future.add_done_callback(finish)
        other._future.add_done_callback(finish)
        return APIFuture(chained)


class Submitted(Generic[T]):
    """An already-submitted call: `await` it for its `APIFuture`, or wait on it directly."""

    def __init__(self, future: APIFuture[T]):
        self.future = future

    def __await__(self):
        async def resolve() -> APIFuture[T]:
            return self.future

        return resolve().__await__()

    def result(self, timeout: float | None = None) -> T:
        return self.future.result(timeout)

    async def result_async(self, timeout: float | None = None) -> T:
        return await self.future.result_async(timeout)


class ReadyClient:
    """Mixin: a client that is also its own completed future (`.result()`, `await client`)."""

    def result(self, timeout: float | None = None):
        return self

    async def result_async(self, timeout: float | None = None):
        return self

    def __await__(self):
        return self.result_async().__await__()


class AsyncTrainingSpellings:
    """The older `*_async` spellings of a training client's calls: each submits the call and returns `Submitted`.

    Shared by the local and the remote training client, which define the calls themselves.
    """

    def forward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None) -> Submitted:
        return Submitted(self.forward(data, loss_fn, loss_fn_config))

    def forward_backward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None) -> Submitted:
        return Submitted(self.forward_backward(data, loss_fn, loss_fn_config))

    def optim_step_async(self, adam_params=None) -> Submitted:
        return Submitted(self.optim_step(adam_params))

    def save_state_async(self, name: str) -> Submitted:
        return Submitted(self.save_state(name))

    def load_state_async(self, path: str) -> Submitted:
        return Submitted(self.load_state(path))

    def load_state_with_optimizer_async(self, path: str) -> Submitted:
        return Submitted(self.load_state_with_optimizer(path))

    def save_weights_for_sampler_async(self, name: str) -> Submitted:
        return Submitted(self.save_weights_for_sampler(name))
