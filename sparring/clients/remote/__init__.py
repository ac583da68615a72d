"""The Tinker-protocol backend: the same client classes over any Tinker-protocol service, through the `tinker` SDK."""

from .sampling import RemoteSamplingClient
from .service import RemoteServiceClient
from .training import RemoteTrainingClient

__all__ = ["RemoteSamplingClient", "RemoteServiceClient", "RemoteTrainingClient"]
