"""The Tinker wire protocol (`/api/v1`): what the `tinker` SDK's clients talk to.

`wire` validates the JSON request bodies (and converts them to `sparring.types`),
`proto` reads and writes the protobuf bodies, `routes` maps HTTP onto
`service` (`sessions`, `training_models`, `sampling_sessions`), whose long
operations are `futures` polled by id; `lanes` keep each model's requests in `seq_id` order,
`sampling` does the work of one sample request and `checkpoints` map
`tinker://` paths onto directories.
"""

from .futures import FutureStore
from .routes import tinker_router
from .service import TinkerService
from .wire import WireError, describe

__all__ = ["FutureStore", "TinkerService", "WireError", "describe", "tinker_router"]
