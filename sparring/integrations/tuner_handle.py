"""`TunerHandle`: the `tuner` a workflow gets, with a model for every agent framework.

`sparring.rollout.ModelRouter` routes each agent to a trainable or a frozen
sparring `ChatModel`, and that is all the runner needs. Agents built on other
frameworks want the same routed model in their own form: an AgentScope chat
model, an `openai.AsyncOpenAI`, or a base URL and an API key. Those forms
come from the AgentScope adapter (this package) and the OpenAI-compatible
episode endpoint (`sparring.server.openai`), both above the rollout layer, so
the methods that hand them out live here, on a subclass of the router: the
runner below keeps running episodes with any router, and every place that
builds the handles a workflow gets (the trainer's models, the evaluation's
baselines, a Ray worker's `RemoteTunerSpec`) builds this one. For the same
reason it overrides `workflow_model`: the models a function-style workflow
receives are also AgentScope chat models when AgentScope is installed.

AgentJet's `AjetTuner` spellings are aliases here, with AgentJet's defaults
(an agent named 'default_agent_name' tagged 'default_target_tag'):
`as_raw_openai_sdk_client` is `as_openai_client` and `as_oai_baseurl_apikey`
is `as_base_url_api_key`; `AjetTuner` is this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..rollout import ChatModel, EpisodeRecorder, ModelRouter, current_recorder
from .agentscope import agentscope_model, as_workflow_model, is_agentscope_model, load_workflow_model_adapter

AGENTJET_AGENT_NAME = "default_agent_name"
"""The agent name AgentJet's handle methods use when none is given."""
AGENTJET_TARGET_TAG = "default_target_tag"
"""The target tag AgentJet's handle methods use when none is given."""


@dataclass  # a dataclass again, so its __init__ calls __post_init__
class TunerHandle(ModelRouter):
    """What a workflow gets to build its agents: `chat_model(...)` routing, in sparring's or another framework's
    form."""

    def __post_init__(self) -> None:
        # here, where the runner builds an episode's tuner: before the episode's clock starts
        load_workflow_model_adapter()

    def workflow_model(self, model: ChatModel) -> ChatModel:
        """`model` as a function-style workflow or a judge receives it: also an AgentScope chat model when AgentScope
        is installed, so AgentScope-tuner workflows can hand it straight to their agents."""
        return as_workflow_model(model)

    def as_agentscope_model(
        self, agent_name: str = AGENTJET_AGENT_NAME, target_tag: str | None = None, debug_model: Any = None
    ):
        """An AgentScope chat model for this agent, routed like `chat_model`.

        `debug_model` may also be an AgentScope chat model: an agent that does not train gets it as is.
        """
        if is_agentscope_model(debug_model):
            if not self.is_trainable(target_tag or agent_name):
                return debug_model
            debug_model = None
        return agentscope_model(self.chat_model(agent_name, target_tag, debug_model))

    def as_base_url_api_key(
        self,
        agent_name: str,
        target_tag: str | None = None,
        debug_model: ChatModel | str | None = None,
        model: str | None = None,
    ):
        """`(base_url, api_key)` of an OpenAI-compatible endpoint for this agent, routed like `chat_model`.

        Calls made with the key are recorded in this episode under `agent_name` (trained when the agent is
        trainable); the key stops working when the episode ends. The first call starts a loopback server in
        this process. The returned `EpisodeEndpoint` unpacks as a tuple and also has `.model`.
        """
        from ..server.openai import episode_server  # imported on use: `import sparring` does not load FastAPI

        routed = self.chat_model(agent_name, target_tag, debug_model, model)
        return episode_server().endpoint(routed, _episode_recorder("as_base_url_api_key"))

    def as_openai_client(
        self,
        agent_name: str,
        target_tag: str | None = None,
        debug_model: ChatModel | str | None = None,
        model: str | None = None,
    ):
        """An `openai.AsyncOpenAI` for this agent, routed like `chat_model`, that reaches sparring in process (no port).

        Its requests go through the same OpenAI-compatible endpoint code as `as_base_url_api_key`'s.
        """
        from ..server.openai import episode_server  # imported on use: `import sparring` does not load FastAPI

        routed = self.chat_model(agent_name, target_tag, debug_model, model)
        return episode_server().openai_client(routed, _episode_recorder("as_openai_client"))

    def as_raw_openai_sdk_client(
        self,
        agent_name: str = AGENTJET_AGENT_NAME,
        target_tag: str | None = AGENTJET_TARGET_TAG,
        debug_model: ChatModel | str | None = None,
        model: str | None = None,
    ):
        """AgentJet's name for `as_openai_client`: an `openai.AsyncOpenAI` for this agent, in process."""
        return self.as_openai_client(agent_name, target_tag, debug_model, model)

    def as_oai_baseurl_apikey(
        self,
        agent_name: str = AGENTJET_AGENT_NAME,
        target_tag: str | None = AGENTJET_TARGET_TAG,
        debug_model: ChatModel | str | None = None,
        model: str | None = None,
    ):
        """AgentJet's name for `as_base_url_api_key`: `.base_url`, `.api_key` and `.model` of a loopback endpoint
        for this agent."""
        return self.as_base_url_api_key(agent_name, target_tag, debug_model, model)


AjetTuner = TunerHandle
"""AgentJet's name for the handle its workflows get (`execute(self, workflow_task, tuner: AjetTuner)`)."""


def _episode_recorder(method: str) -> EpisodeRecorder:
    recorder = current_recorder()
    if recorder is None:
        raise RuntimeError(
            f"tuner.{method}(...) must be called inside an episode (a workflow run by tune(), `sparring "
            "run` or run_episodes)"
        )
    return recorder
