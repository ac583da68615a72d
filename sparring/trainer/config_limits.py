"""The upper bounds of a config's numeric fields.

Every number a job config holds has one, far beyond any sane run and low
enough that a typo -- an extra zero, `group_size: 1e12` -- is refused before
anything runs; the field's error message states its bound, and the generated
configuration reference shows it.
"""

MAX_STEPS = 1_000_000
MAX_EPOCHS = 100_000
MAX_TASKS = 100_000_000
MAX_SEED = 2**32 - 1
MAX_CONTEXT_TOKENS = 1_048_576
MAX_NEW_TOKENS = 131_072
MAX_TEMPERATURE = 10.0
MAX_VOCABULARY = 1_048_576
MAX_LORA_RANK = 1024
MAX_LEARNING_RATE = 1.0
MAX_GROUP_SIZE = 1024
MAX_BATCH_SIZE = 4096
MAX_EPISODES_PER_STEP = 65_536
MAX_COEFFICIENT = 100.0
MAX_GRAD_CLIP_NORM = 1e6
MAX_CONCURRENCY = 4096
MAX_EPISODE_TIMEOUT_S = 86_400.0
MAX_ABS_REWARD = 1e6
MAX_RAY_CPUS = 1024.0
MAX_STALENESS = 16
