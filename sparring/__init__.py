"""sparring: train the LLM agents inside multi-agent workflows with reinforcement learning."""

from . import types
from .engine import EngineConfig
from .training import APIFuture, SamplingClient, ServiceClient, TrainingClient

__all__ = ["APIFuture", "EngineConfig", "SamplingClient", "ServiceClient", "TrainingClient", "types"]
__version__ = "0.1.0"
