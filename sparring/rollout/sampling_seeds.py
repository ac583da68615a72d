"""Sampling seeds derived from what a call is, not from when it arrives.

The engine seeds a request that carries no seed from one stream, in the
order requests reach it. Concurrent episodes reach it in an order that
depends on timing (how batches form on a loaded machine), so the same
weights on the same games could sample differently from one evaluation to
the next. `derived_seed` instead hashes a call's identity (the run's seed
and step, the episode's index in its batch, the agent, the call's number),
which no timing changes: `run_episodes` gives each episode its seed and the
episode's recorder (`EpisodeRecorder.call_seed`) each call's.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 32
"""Derived seeds stay below 2**32: remote sampling services multiply a request's seed per sample."""


def derived_seed(*parts: int | str) -> int:
    """A seed in [0, 2**32) that depends only on `parts` (the same in every process: no salted `hash`)."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=SEED_BITS // 8).digest()
    return int.from_bytes(digest, "little")
