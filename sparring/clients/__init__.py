"""Tinker-shaped clients: ServiceClient -> TrainingClient / SamplingClient, with futures; local or remote."""

from .futures import APIFuture, Submitted
from .remote import RemoteSamplingClient, RemoteServiceClient, RemoteTrainingClient
from .sampling_client import SamplingClient
from .service_client import ServiceClient
from .training_client import TrainingClient

__all__ = [
    "APIFuture",
    "RemoteSamplingClient",
    "RemoteServiceClient",
    "RemoteTrainingClient",
    "SamplingClient",
    "ServiceClient",
    "Submitted",
    "TrainingClient",
]
