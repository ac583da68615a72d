"""sparring: train the LLM agents inside multi-agent workflows with reinforcement learning.

The names a user imports, all from here: the job (`tune`, `Job`, the configs), the workflow types and
chat models, the scripted-policy helpers for baselines, the Tinker-shaped training clients, the
AgentScope bridge and the readers of a run's records. The packaged games are `sparring.envs`.
"""

from . import integrations as _integrations
from . import types
from .clients import APIFuture, SamplingClient, ServiceClient, TrainingClient
from .engine import EngineConfig
from .integrations import AjetTuner, ForeignTurnsWarning, HistoryRewriteWarning, TunerHandle, agentscope_model
from .logging import read_metrics, read_rollouts
from .rollout import (
    ChatModel,
    ChatResponse,
    FrozenChatModel,
    JudgeOutput,
    OpenAIChatModel,
    ScriptedChatModel,
    ScriptedPolicy,
    Workflow,
    WorkflowOutput,
    WorkflowTask,
)
from .trainer import AlgorithmConfig, ConfigError, DatasetConfig, DatasetError, Job, LeagueConfig, LoggingConfig, RunResult, TuneConfig, TunerModelConfig, load_config_file, tune

__all__ = [
    "APIFuture",
    "AgentScopeChatModel",
    "AjetTuner",
    "AlgorithmConfig",
    "ChatModel",
    "ChatResponse",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "EngineConfig",
    "ForeignTurnsWarning",
    "FrozenChatModel",
    "HistoryRewriteWarning",
    "Job",
    "JudgeOutput",
    "LeagueConfig",
    "LoggingConfig",
    "OpenAIChatModel",
    "RunResult",
    "SamplingClient",
    "ScriptedChatModel",
    "ScriptedPolicy",
    "ServiceClient",
    "TimelineFormatter",
    "TrainingClient",
    "TuneConfig",
    "TunerHandle",
    "TunerModelConfig",
    "Workflow",
    "WorkflowOutput",
    "WorkflowTask",
    "agentscope_model",
    "load_config_file",
    "read_metrics",
    "read_rollouts",
    "tune",
    "types",
]
__version__ = "0.1.0"

_AGENTSCOPE_CLASSES = ("AgentScopeChatModel", "TimelineFormatter")


def __getattr__(name: str):
    # AgentScope's classes need AgentScope installed: resolved on first use, not on import (as in sparring.integrations).
    if name in _AGENTSCOPE_CLASSES:
        return getattr(_integrations, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
