"""`sparring` on the command line: train, debug-run, evaluate, serve, view a run, export what it trained, start a game.

    sparring train config.yaml [--set algorithm.learning_rate=3e-5] [--resume RUN_DIR | --overwrite]
    sparring train --conf config.yaml         # the same (AgentJet's spelling)
    sparring train guess_number               # a packaged game's name: its default config
    sparring train guess_number --steps 2 --eval-tasks 8   # a short run
    sparring run config.yaml --tasks 2        # episodes without training, transcripts printed
    sparring eval config.yaml [--adapter PATH] [--tasks 100] [--output comparison.json]
    sparring eval config.yaml --adapter A --adapter B ...   # several adapters (a run's snapshots) side by side
    sparring serve --model smollm2-135m-instruct --port 8000   # Tinker API under /api/v1, OpenAI chat under /v1
    sparring view RUN_DIR [-o report.html] [--serve]          # one HTML file: curves, evaluation, token-level rollouts
    sparring export RUN_DIR OUT [--merged]                     # the adapter or merged model, for peft/transformers/vLLM
    sparring new NAME [--dir PARENT]                           # a game of your own in NAME/, ready to train

Wherever a config file goes, a game's name (`sparring.envs.GAMES`) may stand instead.
A bad config -- a field, the file, the workflow's import path, a dataset file,
a model's path or name, a device -- is one line on stderr (`error: ` and the
field path, what is wrong and what would work) and exit code 2, found before
any model loads and before a run directory is left behind. A training run
stopped because every episode failed (`EpisodesFailingError`: too many such
steps in a row, or all of them), because no step trained a token
(`NothingTrainedError`), because a checkpoint is damaged or weights went NaN
(`CheckpointError`) or because a file could not be written (a full disk) is
one line with the reason and exit code 1, and so is a `sparring run` in which
episodes failed (a run in which no trainable agent spoke warns). Ctrl-C / SIGTERM stop a run with a
checkpoint of its last completed step, one line with the resume command and
exit code 130 / 143. The config is read and checked before torch and the
trainer are imported (the commands import what they need), so a malformed one
is reported at once.
"""

from __future__ import annotations

import logging
import os
import sys

from ..trainer.schema import lingering_threads
from .common import CONFIG, OVERRIDES, app, options

# The commands, registered on `app` in the order `sparring --help` lists them.
from .runs import MARKERS, _same_file, evaluate, run, train
from .tools import _is_loopback, export, new, serve, view

__all__ = [
    "CONFIG",
    "MARKERS",
    "OVERRIDES",
    "app",
    "evaluate",
    "export",
    "main",
    "new",
    "options",
    "run",
    "serve",
    "train",
    "view",
    "_is_loopback",
    "_same_file",
]


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except SystemExit as done:
        if not lingering_threads():
            raise
        # Python would wait for these at exit, for ever if a workflow left them running: exit without waiting.
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
