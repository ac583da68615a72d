"""The local compute engine: one base model, many LoRA adapters, batched sampling and training."""

from .adapters import AdapterBank
from .engine import Engine, EngineConfig, get_engine
from .learner import DatumError
from .losses import LOSSES

__all__ = ["AdapterBank", "DatumError", "Engine", "EngineConfig", "LOSSES", "get_engine"]
