"""The OpenAI-compatible chat API (`/v1`): for agents of any framework, and for plain clients.

`routes` serves `/v1/models`, `/v1/chat/completions` (validated by `schema`)
and `/v1/responses` (the Responses API: `responses_schema` translates it into
a chat-completions request, `responses_body` shapes the reply and its events),
from a `chat_service` (who answers, and whether the request fits);
a request's `model` name is looked up in `served_models`, unless it
carries an episode key (`episode_keys`), which routes it to one agent of one
episode. `episode_server` is the training process's own endpoint for those
keys, behind `tuner.as_base_url_api_key(...)` and `tuner.as_openai_client(...)`.
"""

from .episode_keys import EpisodeEndpoint, EpisodeKeys
from .episode_server import EpisodeServer, episode_server
from .routes import openai_router
from .served_models import ServedModels, UnservedModelError

__all__ = [
    "EpisodeEndpoint",
    "EpisodeKeys",
    "EpisodeServer",
    "ServedModels",
    "UnservedModelError",
    "episode_server",
    "openai_router",
]
