"""AgentScope agents on sparring chat models: the bridge shared by both AgentScope majors.

`agentscope_model(chat_model)` wraps a routed sparring `ChatModel` (the
trainable policy or a frozen model) in an AgentScope `ChatModelBase` of the
installed AgentScope, so an AgentScope agent's every call goes through the
sparring model and a trainable one records its tokens on the episode like any
other trainable model. No HTTP server is involved. Two adapters stand behind it
because the two majors disagree on the model interface:

- AgentScope 1.x (`agentscope_v1.AgentScopeChatModel`): the agent formats its
  memory with its own formatter and calls `model(messages: list[dict], tools,
  tool_choice, structured_model)`; replies are `ToolUseBlock`s / `TextBlock`s.
- AgentScope 2.x (`agentscope_v2.AgentScopeChatModel`): the agent calls
  `model(messages: list[Msg], tools, tool_choice: ToolChoice)`; the model
  formats with its own `formatter` in `_call_api`; replies are `ToolCallBlock`s.

`as_workflow_model(chat_model)` is what function-style workflows (and judges)
receive when AgentScope is installed: the installed major's `DualChatModel`,
an `AgentScopeChatModel` that is also a sparring `ChatModel` (the sparring
side is `agentscope_dual.SparringSide`), so code written for AgentScope's
tuner hands `model` and `auxiliary_models[...]` straight to its agents while
sparring's own workflows keep calling them as sparring models. Without
AgentScope (or with a major that has no adapter) the model is handed out as is.

`TimelineFormatter(agent_name)` (one per major, a subclass of that major's
`OpenAIChatFormatter`) keeps the agent's own replies as assistant turns and
turns every other speaker into a user turn "Name: text", each message on its
own: a later prompt then always extends an earlier one, so a multi-turn agent's
calls merge into one training sequence. The 2.x variant also keeps the
wall-clock time that 2.x agents inject into their context out of the prompt.

The warnings and the cancellation error are the bridge's (`agentscope_bridge`), re-exported here.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from ..rollout.chat_model import ChatModel
from .agentscope_bridge import EpisodeCancelledError, ForeignTurnsWarning, HistoryRewriteWarning
from .agentscope_dual import SparringSide

__all__ = [
    "EpisodeCancelledError",
    "ForeignTurnsWarning",
    "HistoryRewriteWarning",
    "agentscope_major",
    "agentscope_model",
    "as_workflow_model",
    "is_agentscope_model",
]

INSTALL_HINT = "pip install 'sparring[agentscope]' (AgentScope 2.x) or 'sparring[agentscope1]' (AgentScope 1.x)"
SUPPORTED_MAJORS = (1, 2)
_VERSIONED = {"AgentScopeChatModel", "DualChatModel", "TimelineFormatter"}


def agentscope_major() -> int:
    """The major version of the installed AgentScope (1 or 2); ImportError with an install hint when there is none."""
    try:
        import agentscope
    except ImportError as error:
        raise ImportError(f"AgentScope is not installed: {INSTALL_HINT}") from error
    major = int(str(agentscope.__version__).split(".")[0])
    if major not in SUPPORTED_MAJORS:
        raise ImportError(
            f"AgentScope {agentscope.__version__} is not supported (majors {SUPPORTED_MAJORS}): {INSTALL_HINT}"
        )
    return major


def _versioned_module():
    if agentscope_major() == 1:
        from . import agentscope_v1 as module
    else:
        from . import agentscope_v2 as module
    return module


def __getattr__(name: str) -> Any:
    # AgentScopeChatModel / TimelineFormatter are the installed major's classes, resolved on first use.
    if name in _VERSIONED:
        return getattr(_versioned_module(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def agentscope_model(chat_model: ChatModel, **options: Any):
    """An AgentScope chat model (of the installed major) whose calls go to `chat_model`.

    `options` go to the adapter: 1.x `generate_kwargs`; 2.x `formatter`, `parameters`, `context_size`.
    """
    if not isinstance(chat_model, ChatModel):
        raise TypeError(f"agentscope_model wraps a sparring ChatModel, got {type(chat_model).__name__}")
    if isinstance(chat_model, SparringSide):  # a workflow's model already is one: wrap what it wraps
        chat_model = chat_model.chat_model
    return _versioned_module().AgentScopeChatModel(chat_model, **options)


@functools.cache
def _workflow_adapter():
    """The installed major's adapter module, imported once per process; None without a supported AgentScope."""
    if importlib.util.find_spec("agentscope") is None:
        return None
    try:
        return _versioned_module()
    except ImportError:  # an AgentScope major without an adapter: sparring's own workflows must still run
        return None


def load_workflow_model_adapter() -> None:
    """Import the installed AgentScope's adapter now (a second or two), so no episode's time pays for it."""
    _workflow_adapter()


def as_workflow_model(chat_model: ChatModel) -> ChatModel:
    """`chat_model` as workflows receive it: a `DualChatModel` (also an AgentScope chat model) when a supported
    AgentScope is installed, else `chat_model` itself."""
    adapter = _workflow_adapter()
    if adapter is None or is_agentscope_model(chat_model):
        return chat_model
    return adapter.DualChatModel(chat_model)


def is_agentscope_model(model: Any) -> bool:
    """Whether `model` is an AgentScope chat model (of the installed AgentScope, if any)."""
    try:
        from agentscope.model import ChatModelBase
    except ImportError:
        return False
    return isinstance(model, ChatModelBase)
