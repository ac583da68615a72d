"""Which chat model answers a request's `model` name on a served endpoint.

`ServedModels` is what `sparring serve` answers for without an episode key:
names registered explicitly (a live policy, a snapshot: any `ChatModel`),
samplers found by name elsewhere (the Tinker API's sampling sessions), the
base models it was started with, and saved adapters named by their
directory (a `save_weights_for_sampler` path, any PEFT adapter dir), loaded
on first use and kept. None of these calls is trained: outside an episode
there is no recorder, so they are served like any frozen model.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ...rollout import ChatModel, FrozenChatModel
from ...clients import SamplingClient, ServiceClient


class UnknownModelError(KeyError):
    """A request named a model this endpoint does not serve."""


class ServedModels:
    """Chat models by the names clients send as `model`."""

    def __init__(
        self,
        models: Mapping[str, ChatModel] | None = None,
        service: ServiceClient | None = None,
        base_models: Sequence[str] = (),
        samplers: Callable[[str], SamplingClient | None] | None = None,
    ):
        """`models` by name; `samplers(name)` finds further ones (or None); `base_models` and adapter directories
        are sampled through `service`."""
        self._models: dict[str, ChatModel] = dict(models or {})
        self._service = service
        self._base_models = list(base_models)
        self._samplers = samplers
        self._lock = threading.Lock()
        if self._base_models and service is None:
            raise ValueError("base_models need a ServiceClient to sample from (service=...)")

    def register(self, name: str, chat_model: ChatModel) -> None:
        """Serve `chat_model` under `name` (replacing any model of that name)."""
        with self._lock:
            self._models[name] = chat_model

    def names(self) -> list[str]:
        with self._lock:
            return sorted({*self._models, *self._base_models})

    def resolve(self, name: str) -> ChatModel:
        """The model for `name`; a base model or adapter directory is loaded on first use."""
        with self._lock:
            if name in self._models:
                return self._models[name]
        sampler = self._samplers(name) if self._samplers is not None else None
        if sampler is not None:
            return FrozenChatModel(sampler, agent=name)
        if self._service is not None and name in self._base_models:
            loaded = FrozenChatModel(self._service.create_sampling_client(base_model=name), agent=name)
        elif self._service is not None and (Path(name) / "adapter_config.json").is_file():
            loaded = FrozenChatModel(self._service.create_sampling_client(model_path=name), agent=name)
        else:
            served = ", ".join(self.names()) or "none"
            raise UnknownModelError(f"model {name!r} is not served here; served models: {served} (or a saved adapter directory)")
        with self._lock:
            return self._models.setdefault(name, loaded)
