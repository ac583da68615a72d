"""How a transformers model takes and returns its KV cache, across the releases sparring's range allows.

transformers 5.24 renamed the forward keyword `past_key_values` to `cache` (the old name now warns, and goes in
5.40) and the output field likewise; releases before 5.24 know only the old names. `cache_kwargs(model, cache)`
and `returned_cache(output)` speak whichever the installed release expects, so no run prints a deprecation
warning and none breaks when the old name is removed.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


@functools.cache
def _cache_keyword(forward_owner: type) -> str:
    parameters = inspect.signature(forward_owner.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_kwargs(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """`{keyword: cache}` for `model(...)`: `cache=` where its forward takes it (transformers >= 5.24), else
    `past_key_values=`."""
    return {_cache_keyword(type(model)): cache}


def returned_cache(output: Any) -> Any:
    """The KV cache a forward returned (`output.cache` since transformers 5.24, `output.past_key_values` before)."""
    return output.cache if hasattr(type(output), "cache") else output.past_key_values
