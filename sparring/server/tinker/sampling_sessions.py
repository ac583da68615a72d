"""Sampling sessions of the Tinker wire protocol: the bookkeeping of `sample-<random>` samplers.

A sampling session is a sparring `SamplingClient` on a snapshot, the live adapter, saved sampler weights, or the
base model (a `sampling.Sampler`, whose module does the work of one sample request). `SamplingSessions` is the part
of `TinkerService` that creates them (a retried create gets the same sampler), finds them for the OpenAI API, and
queues sample requests (a retried request answered once).
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

from ...clients import SamplingClient, ServiceClient
from ...engine import Engine
from ..limits import LimitExceeded, ServerLimits
from . import wire
from .checkpoints import CheckpointStore, adapter_dir
from .futures import FutureStore
from .lanes import remember_recent
from .sampling import Sampler, check_sample, sample_request
from .sessions import Session
from .wire import WireError


class SamplingSessions:
    """The sampling-sessions part of `TinkerService`: it reads the state `TinkerService.__init__` sets (annotated
    below) and finds sessions and samplers through `Sessions`' lookups."""

    base_model: str
    service: ServiceClient
    base_sampler: SamplingClient
    engine: Engine
    store: FutureStore
    limits: ServerLimits
    checkpoints: CheckpointStore
    sessions: dict[str, Session]
    samplers: dict[str, Sampler]

    def _add_sampler(self, sampler_id: str, sampler: Sampler) -> None:
        self.samplers[sampler_id] = sampler
        session = self.sessions.get(sampler.session_id)
        if session is not None:
            session.samplers.append(sampler_id)

    async def create_sampling_session(self, request: wire.CreateSamplingSessionRequest) -> dict:
        session = self.session(request.session_id)
        sampler_id = session.sampler_ids.get(request.sampling_session_seq_id)
        if sampler_id not in self.samplers:
            sampler_id = f"sample-{secrets.token_hex(16)}"
            served_name = self.check_base_model(request.base_model)
            if request.model_path is not None:
                path = adapter_dir(self._local(request.model_path))
                try:
                    client = await asyncio.to_thread(self.service.create_sampling_client, str(path), self.base_model)
                except (FileNotFoundError, ValueError) as error:
                    raise WireError(400, f"cannot sample from {request.model_path}: {error}") from None
            else:
                client = self.base_sampler
            self._add_sampler(
                sampler_id,
                Sampler(
                    client=client, session_id=request.session_id, served_name=served_name, model_path=request.model_path
                ),
            )
            session.sampler_ids[request.sampling_session_seq_id] = sampler_id
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    def saved_adapter(self, tinker_path: str) -> Path:
        """The PEFT directory of a checkpoint saved through this server (how the OpenAI API serves it by path)."""
        return adapter_dir(self.checkpoints.local(tinker_path))

    def sampling_client(self, sampler_id: str) -> SamplingClient | None:
        """The sampler of a sampling session id, or None (how the OpenAI API finds them by `model` name)."""
        sampler = self.samplers.get(sampler_id)
        return sampler.client if sampler is not None else None

    def get_sampler(self, sampler_id: str) -> dict:
        sampler = self.sampler(sampler_id)
        return {"sampler_id": sampler_id, "base_model": sampler.served_name, "model_path": sampler.model_path}

    def sample(self, request: wire.SampleRequest) -> dict:
        request.check_served()
        if request.sampling_session_id is None:
            raise WireError(
                400, "invalid SampleRequest: sampling_session_id is required (create one with create_sampling_session)"
            )
        sampler = self.sampler(request.sampling_session_id)
        if request.seq_id is not None and request.seq_id in sampler.request_ids:
            request_id = sampler.request_ids[request.seq_id]
        else:
            try:
                check_sample(request, self.engine, self.limits)
            except LimitExceeded as error:
                raise WireError(400, str(error)) from None
            request_id = self.store.start(sample_request(sampler.client, request), "Sample", owner=sampler.session_id)
            if request.seq_id is not None:
                remember_recent(sampler.request_ids, request.seq_id, request_id)
        return {
            "request_id": request_id,
            "sample_sequence_ids": [f"{request_id}:{index}" for index in range(request.num_samples)],
        }
