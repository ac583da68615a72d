"""Runners: where each episode's workflow runs (this process, or a Ray cluster), picked by `runner.backend`.

The Ray runner (`sparring.runners.ray`) is not imported here: it needs Ray, an optional extra.
"""

from .registry import RUNNERS, RunnerChoice, RunnerFactory, make_player

__all__ = ["RUNNERS", "RunnerChoice", "RunnerFactory", "make_player"]
