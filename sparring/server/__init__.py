"""`sparring serve`: two protocols over HTTP on one engine.

`tinker/` is the Tinker wire protocol, `openai/` the OpenAI-compatible chat
API (with the training process's own episode endpoint), `app.create_app`
composes both into the served app, and `in_thread.serve_in_thread` serves an
app from a thread of a training process.
"""

from .app import create_app

__all__ = ["create_app"]
