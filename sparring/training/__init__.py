"""Tinker-shaped clients: ServiceClient -> TrainingClient / SamplingClient, with futures."""

from .futures import APIFuture, Submitted
from .sampling_client import SamplingClient
from .service_client import ServiceClient
from .training_client import TrainingClient

__all__ = ["APIFuture", "SamplingClient", "ServiceClient", "Submitted", "TrainingClient"]
