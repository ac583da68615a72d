"""Base models: the catalogue, loading (with GGUF conversion) and chat renderers."""

from sparring.models.catalogue import (
    KNOWN_MODELS,
    ModelNotInstalledError,
    ModelSpec,
    UnknownModelError,
    hub_id,
    resolve_model,
    sparring_home,
)
from sparring.models.loading import LoadedModel, converted_cache_dir, load_base_model, load_tokenizer, parse_device
from sparring.models.renderer import ChatMLRenderer, ChatRenderer, TemplateRenderer, get_renderer
from sparring.models.tiny import build_tiny_model

__all__ = [
    "KNOWN_MODELS",
    "ChatMLRenderer",
    "ChatRenderer",
    "LoadedModel",
    "ModelNotInstalledError",
    "ModelSpec",
    "TemplateRenderer",
    "UnknownModelError",
    "build_tiny_model",
    "converted_cache_dir",
    "get_renderer",
    "hub_id",
    "load_base_model",
    "load_tokenizer",
    "parse_device",
    "resolve_model",
    "sparring_home",
]
