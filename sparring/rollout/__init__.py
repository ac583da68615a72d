"""Episodes: chat models (sampled or scripted), the recorder, timelines and their merging, workflows, their tasks
and the model router, the runner."""

from .chat_model import ChatModel, ChatResponse, FrozenChatModel, OpenAIChatModel, PolicyChatModel
from .outcomes import ERROR_KINDS
from .recorder import EpisodeRecorder, current_recorder, recording
from .runner import RunnerSettings, run_episode, run_episodes
from .scripted_model import ScriptedChatModel, ScriptedPolicy
from .timelines import merge_calls
from .tool_choice import ToolChoice
from .types import Episode, JudgeOutput, ModelCall, Timeline, WorkflowOutput
from .workflow import ModelRouter, Workflow, WorkflowSignatureError, as_episode_fn
from .workflow_task import WorkflowTask

__all__ = [
    "ERROR_KINDS",
    "ChatModel",
    "ChatResponse",
    "Episode",
    "EpisodeRecorder",
    "FrozenChatModel",
    "JudgeOutput",
    "ModelCall",
    "ModelRouter",
    "OpenAIChatModel",
    "PolicyChatModel",
    "RunnerSettings",
    "ScriptedChatModel",
    "ScriptedPolicy",
    "Timeline",
    "ToolChoice",
    "Workflow",
    "WorkflowOutput",
    "WorkflowSignatureError",
    "WorkflowTask",
    "as_episode_fn",
    "current_recorder",
    "merge_calls",
    "recording",
    "run_episode",
    "run_episodes",
]
