"""`sparring serve`: two protocols over HTTP on one engine.

`tinker/` is the Tinker wire protocol, `openai/` the OpenAI-compatible chat
API (with the training process's own episode endpoint), `app.create_app`
composes both into the served app, `limits.ServerLimits` bounds every
request it accepts, `served_names.parse_served_base` reads `serve --model` (one model, several
names), `hub_cache` writes each served name's tokenizer where Hugging Face
lookups find it offline, `shutdown.serve_until_stopped` runs it until SIGTERM and
drains, `in_thread.serve_in_thread` serves an app from a thread of a
training process, and `provided.Provide` hands a router's service to its
named route handlers.
"""

from .app import create_app
from .limits import ServerLimits
from .served_names import ServedBase, parse_served_base
from .shutdown import serve_until_stopped

__all__ = ["ServedBase", "ServerLimits", "create_app", "parse_served_base", "serve_until_stopped"]
