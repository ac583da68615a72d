"""`sparring serve`: two protocols over HTTP on one engine.

`tinker/` is the Tinker wire protocol, `openai/` the OpenAI-compatible chat
API (with the training process's own episode endpoint), `app.create_app`
composes both into the served app, `limits.ServerLimits` bounds every
request it accepts, `shutdown.serve_until_stopped` runs it until SIGTERM and
drains, and `in_thread.serve_in_thread` serves an app from a thread of a
training process.
"""

from .app import create_app
from .limits import ServerLimits
from .shutdown import serve_until_stopped

__all__ = ["ServerLimits", "create_app", "serve_until_stopped"]
