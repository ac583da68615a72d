"""sparring: train the LLM agents inside multi-agent workflows with reinforcement learning."""

from . import types
from .engine import EngineConfig
from .integrations import TunerHandle
from .rollout import ChatModel, ChatResponse, JudgeOutput, ScriptedChatModel, Workflow, WorkflowOutput
from .trainer import AlgorithmConfig, DatasetConfig, Job, LoggingConfig, TunerModelConfig, tune
from .clients import APIFuture, SamplingClient, ServiceClient, TrainingClient

__all__ = [
    "APIFuture",
    "AlgorithmConfig",
    "DatasetConfig",
    "Job",
    "LoggingConfig",
    "TunerModelConfig",
    "tune",
    "ChatModel",
    "ChatResponse",
    "EngineConfig",
    "JudgeOutput",
    "SamplingClient",
    "ScriptedChatModel",
    "ServiceClient",
    "TrainingClient",
    "TunerHandle",
    "Workflow",
    "WorkflowOutput",
    "types",
]
__version__ = "0.1.0"
