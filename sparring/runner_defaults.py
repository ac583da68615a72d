"""How episodes run when nothing says otherwise: the one statement of the runner's defaults.

`rollout.RunnerSettings` (the runner's own settings) and the job config (`algorithm.group_size`, the `runner:`
section) both take their defaults from here, so they cannot drift apart; this module imports nothing, so the config
reads it without loading the rollout package (and torch).
"""

GROUP_SIZE = 4
"""Episodes per task; they share an advantage baseline."""
MAX_CONCURRENCY = 64
"""Most episodes running at once."""
EPISODE_TIMEOUT_S = 300.0
"""Seconds of an episode's own time before it is cancelled and counted as an error."""
ERROR_REWARD = -0.1
"""Reward of an episode that raised, timed out or returned an outcome that does not fit."""

RUNNER_DEFAULTS = {
    "group_size": GROUP_SIZE,
    "max_concurrency": MAX_CONCURRENCY,
    "episode_timeout_s": EPISODE_TIMEOUT_S,
    "error_reward": ERROR_REWARD,
}
"""The defaults above by the name of the field they fill."""
