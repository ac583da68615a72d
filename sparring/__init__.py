"""sparring: train the LLM agents inside multi-agent workflows with reinforcement learning."""

from . import types
from .engine import EngineConfig
from .rollout import ChatModel, ChatResponse, JudgeOutput, TunerHandle, Workflow, WorkflowOutput
from .training import APIFuture, SamplingClient, ServiceClient, TrainingClient

__all__ = [
    "APIFuture",
    "ChatModel",
    "ChatResponse",
    "EngineConfig",
    "JudgeOutput",
    "SamplingClient",
    "ServiceClient",
    "TrainingClient",
    "TunerHandle",
    "Workflow",
    "WorkflowOutput",
    "types",
]
__version__ = "0.1.0"
