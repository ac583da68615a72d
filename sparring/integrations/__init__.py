"""Bridges to other agent frameworks: the tuner handle with a model for each, AgentScope chat models on sparring
chat models."""

from . import agentscope as _agentscope
from .agentscope import (
    EpisodeCancelledError,
    ForeignTurnsWarning,
    HistoryRewriteWarning,
    agentscope_major,
    agentscope_model,
    as_workflow_model,
    is_agentscope_model,
)
from .tuner_handle import AjetTuner, TunerHandle

__all__ = [
    "AgentScopeChatModel",
    "AjetTuner",
    "DualChatModel",
    "EpisodeCancelledError",
    "ForeignTurnsWarning",
    "HistoryRewriteWarning",
    "TimelineFormatter",
    "TunerHandle",
    "agentscope_major",
    "agentscope_model",
    "as_workflow_model",
    "is_agentscope_model",
]


def __getattr__(name: str):
    # The versioned classes need AgentScope installed: resolved on first use, not on import.
    return getattr(_agentscope, name)
