"""The local compute engine: one base model, many LoRA adapters, batched sampling and training; adapters exported
as portable PEFT directories or merged models."""

from .adapters import BASE_MODEL_FILE, AdapterBank
from .engine import Engine, EngineConfig, get_engine
from .export import export_adapter
from .learner import DatumError
from .losses import LOSSES, LossSpec, register_loss
from .operations import saved_rank

__all__ = [
    "AdapterBank",
    "BASE_MODEL_FILE",
    "DatumError",
    "Engine",
    "EngineConfig",
    "LOSSES",
    "LossSpec",
    "export_adapter",
    "get_engine",
    "register_loss",
    "saved_rank",
]
