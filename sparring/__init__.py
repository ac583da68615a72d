"""sparring: train the LLM agents inside multi-agent workflows with reinforcement learning.

The names a user imports, all from here: the job (`tune`, `Job`, the configs), the workflow types and
chat models, the scripted-policy helpers for baselines, the Tinker-shaped training clients, the
AgentScope bridge and the readers of a run's records. The packaged games are `sparring.envs`.

Every name is imported on first use (PEP 562), not with the package: `sparring train` with a bad config reports
it without loading torch (seconds), and `import sparring` stays cheap.
"""

from typing import TYPE_CHECKING

_HOMES = {
    "types": "sparring.types",
    **dict.fromkeys(("APIFuture", "SamplingClient", "ServiceClient", "TrainingClient"), "sparring.clients"),
    "EngineConfig": "sparring.engine",
    **dict.fromkeys(
        (
            "AjetTuner",
            "ForeignTurnsWarning",
            "HistoryRewriteWarning",
            "TunerHandle",
            "agentscope_model",
            "AgentScopeChatModel",
            "TimelineFormatter",
        ),
        "sparring.integrations",
    ),
    **dict.fromkeys(("read_metrics", "read_rollouts"), "sparring.logging"),
    **dict.fromkeys(
        (
            "ChatModel",
            "ChatResponse",
            "FrozenChatModel",
            "JudgeOutput",
            "OpenAIChatModel",
            "ScriptedChatModel",
            "ScriptedPolicy",
            "Workflow",
            "WorkflowOutput",
            "WorkflowTask",
        ),
        "sparring.rollout",
    ),
    **dict.fromkeys(
        (
            "AlgorithmConfig",
            "CheckpointsConfig",
            "ConfigError",
            "DatasetConfig",
            "DatasetError",
            "EvaluationConfig",
            "Job",
            "LeagueConfig",
            "LoggingConfig",
            "RunResult",
            "RunnerConfig",
            "StepEnd",
            "StepHook",
            "StepStart",
            "TuneConfig",
            "TunerModelConfig",
            "ValidationConfig",
            "WarmStartConfig",
            "WorkflowArgs",
            "load_config_file",
            "takes_args",
            "tune",
        ),
        "sparring.trainer",
    ),
}
"""Each public name -> the module it comes from."""

__all__ = [
    "APIFuture",
    "AgentScopeChatModel",
    "AjetTuner",
    "AlgorithmConfig",
    "ChatModel",
    "ChatResponse",
    "CheckpointsConfig",
    "ConfigError",
    "DatasetConfig",
    "DatasetError",
    "EngineConfig",
    "EvaluationConfig",
    "ForeignTurnsWarning",
    "FrozenChatModel",
    "HistoryRewriteWarning",
    "Job",
    "LeagueConfig",
    "JudgeOutput",
    "LoggingConfig",
    "OpenAIChatModel",
    "RunResult",
    "RunnerConfig",
    "SamplingClient",
    "ScriptedChatModel",
    "ScriptedPolicy",
    "ServiceClient",
    "StepEnd",
    "StepHook",
    "StepStart",
    "TimelineFormatter",
    "TrainingClient",
    "TuneConfig",
    "TunerHandle",
    "TunerModelConfig",
    "ValidationConfig",
    "WarmStartConfig",
    "Workflow",
    "WorkflowArgs",
    "WorkflowOutput",
    "WorkflowTask",
    "agentscope_model",
    "load_config_file",
    "read_metrics",
    "read_rollouts",
    "takes_args",
    "tune",
    "types",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
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
    from .trainer import (
        AlgorithmConfig,
        CheckpointsConfig,
        ConfigError,
        DatasetConfig,
        DatasetError,
        EvaluationConfig,
        Job,
        LoggingConfig,
        RunnerConfig,
        RunResult,
        StepEnd,
        StepHook,
        StepStart,
        TuneConfig,
        TunerModelConfig,
        ValidationConfig,
        WarmStartConfig,
        WorkflowArgs,
        load_config_file,
        takes_args,
        tune,
    )


def __getattr__(name: str):
    import importlib

    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOMES[name])
    value = module if name == "types" else getattr(module, name)
    if name not in (
        "AgentScopeChatModel",
        "TimelineFormatter",
    ):  # AgentScope's classes need AgentScope: resolved on every use
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
