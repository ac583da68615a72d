"""Which chat model answers a request's `model` name on a served endpoint.

`ServedModels` is what `sparring serve` answers for without an episode key:
names registered explicitly (a live policy, a snapshot: any `ChatModel`),
samplers found by name elsewhere (the Tinker API's sampling sessions, by
their unguessable id), the base models it was started with (by each served
name: `serve --model NAME=SOURCE` answers `NAME` with SOURCE), adapters the
operator listed by name at start (`serve --adapter NAME=PATH`), and adapters
saved through the server, named by their `tinker://` path (resolved by the
caller-given `saved_adapter`, which confines them to the server's checkpoint
directory). A request can never make the server load an arbitrary directory,
and `/v1/models` lists names only: base models, registered models and the
operator's adapters, never a path a caller sent. Models are loaded on first
use and kept. None of these calls is trained: outside an episode there is no
recorder, so they are served like any frozen model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from ...clients import SamplingClient, ServiceClient
from ...rollout import ChatModel, FrozenChatModel

SAVED_PREFIX = "tinker://"


class UnservedModelError(KeyError):
    """A request named a model this endpoint does not serve."""


class ServedModels:
    """Chat models by the names clients send as `model`."""

    def __init__(
        self,
        models: Mapping[str, ChatModel] | None = None,
        service: ServiceClient | None = None,
        base_models: Mapping[str, str] | None = None,
        samplers: Callable[[str], SamplingClient | None] | None = None,
        adapters: Mapping[str, str | Path] | None = None,
        saved_adapter: Callable[[str], Path] | None = None,
    ):
        """`models` by name; `samplers(name)` finds further ones (or None); `base_models` (served name -> model
        source), `adapters` (name -> PEFT
        directory) and saved adapters (`saved_adapter(tinker path)` -> directory, raising ValueError or
        FileNotFoundError for a path it does not serve) are sampled through `service`."""
        self._models: dict[str, ChatModel] = dict(models or {})
        self._loaded: dict[str, ChatModel] = {}
        self._service = service
        self._base_models = dict(base_models or {})
        self._adapters = {name: Path(path) for name, path in (adapters or {}).items()}
        self._samplers = samplers
        self._saved_adapter = saved_adapter
        self._lock = threading.Lock()
        if (self._base_models or self._adapters or saved_adapter) and service is None:
            raise ValueError("base models and adapters need a ServiceClient to sample from (service=...)")
        for name, path in self._adapters.items():
            if not (path / "adapter_config.json").is_file():
                raise ValueError(f"adapter {name}={path}: not a PEFT adapter directory (no adapter_config.json)")

    def register(self, name: str, chat_model: ChatModel) -> None:
        """Serve `chat_model` under `name` (replacing any model of that name)."""
        with self._lock:
            self._models[name] = chat_model

    def names(self) -> list[str]:
        with self._lock:
            return sorted({*self._models, *self._base_models, *self._adapters})

    def resolve(self, name: str) -> ChatModel:
        """The model for `name`; a base model or adapter is loaded on first use."""
        with self._lock:
            found = self._models.get(name) or self._loaded.get(name)
        if found is not None:
            return found
        sampler = self._samplers(name) if self._samplers is not None else None
        if sampler is not None:
            return FrozenChatModel(sampler, agent=name)
        if name in self._base_models:
            loaded = FrozenChatModel(
                self._service.create_sampling_client(base_model=self._base_models[name]), agent=name
            )
        elif name in self._adapters:
            loaded = FrozenChatModel(
                self._service.create_sampling_client(model_path=str(self._adapters[name])), agent=name
            )
        elif self._saved_adapter is not None and name.startswith(SAVED_PREFIX):
            try:
                directory = self._saved_adapter(name)
            except (ValueError, FileNotFoundError) as error:
                raise UnservedModelError(f"model {name!r} is not served here: {error}") from None
            loaded = FrozenChatModel(self._service.create_sampling_client(model_path=str(directory)), agent=name)
        else:
            served = ", ".join(self.names()) or "none"
            saved = " (or a tinker://... path saved through this server)" if self._saved_adapter is not None else ""
            raise UnservedModelError(f"model {name!r} is not served here; served models: {served}{saved}")
        with self._lock:
            return self._loaded.setdefault(name, loaded)
