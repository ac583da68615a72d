"""The state behind the Tinker wire protocol: sessions, training models, samplers.

`TinkerService` maps the SDK's objects onto sparring's in-process API on one
engine (one base model, which clients may name by any of its served names:
`serve --model NAME=SOURCE`, so a recipe asking for `Qwen/Qwen3.5-9B` gets
the model the operator put behind that name). It is made of three parts, a
module each, over the state it holds:

- `Sessions` (`sessions.py`): a session groups what one `tinker.ServiceClient`
  made, and its ids are the credentials every later request is checked
  against (isolation);
- `TrainingModels` (`training_models.py`): a training model
  `<session>:train:<n>` is a sparring `TrainingClient` behind a `ModelLane`;
- `SamplingSessions` (`sampling_sessions.py`): a sampling session
  `sample-<random>` is a sparring `SamplingClient` (a `sampling.Sampler`).

Every request that does work returns a request id from the `FutureStore`.
Bad input found while decoding a request is a `WireError` (HTTP 4xx); every
request is bounded by `ServerLimits` (and the model's context) before any
work is queued.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...clients import ServiceClient
from ...models import resolve_model
from ..limits import ServerLimits
from .checkpoints import CheckpointStore
from .futures import FutureStore
from .sampling import Sampler
from .sampling_sessions import SamplingSessions
from .sessions import Session, Sessions, TrainingModel
from .training_models import TrainingModels
from .wire import WireError

__all__ = ["TinkerService"]


class TinkerService(Sessions, TrainingModels, SamplingSessions):
    """Sessions, training models and samplers of one served base model."""

    def __init__(
        self,
        base_model: str,
        service: ServiceClient,
        store: FutureStore,
        *,
        served_names: Sequence[str] = (),
        limits: ServerLimits | None = None,
        gap_s: float = 120.0,
        max_snapshots_per_model: int = 8,
        session_idle_s: float = 3600.0,
        abandon_s: float = 120.0,
    ):
        self.base_model = base_model
        self.service = service
        self.store = store
        self.limits = limits or ServerLimits()
        self.checkpoints = CheckpointStore(service.base_dir)
        self.gap_s = gap_s
        self.max_snapshots_per_model = max_snapshots_per_model
        self.session_idle_s = session_idle_s
        self.abandon_s = abandon_s
        self.base_sampler = service.create_sampling_client(base_model=base_model)  # loads the model now
        self.engine = self.base_sampler.engine
        self.served_names = list(dict.fromkeys([*served_names] or [base_model]))
        self.names = {base_model, self.engine.model_spec.name, *self.served_names}
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}

    # Served names -----------------------------------------------------------------

    def check_base_model(self, name: str | None) -> str:
        """The served name a request's `base_model` stands for (the first served name when it gives none)."""
        if name is None:
            return self.served_names[0]
        if name in self.names:
            return name
        try:
            if resolve_model(name).path == self.engine.model_spec.path:
                self.names.add(name)
                return name
        except (ValueError, RuntimeError):
            pass
        raise WireError(
            400, f"base_model {name!r} is not served here; this server serves {', '.join(map(repr, self.served_names))}"
        )
