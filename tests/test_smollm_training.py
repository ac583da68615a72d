"""Integration: the training API and the two-debater recipe on the real SmolLM2-135M-Instruct."""

import asyncio
import importlib.util
from pathlib import Path

import pytest
from safetensors.torch import load_file

from sparring import ServiceClient, types

pytestmark = pytest.mark.smollm
EXAMPLE = Path(__file__).parents[1] / "examples" / "two_debaters.py"


@pytest.fixture(scope="module")
def service(smollm_loaded, tmp_path_factory):
    return ServiceClient(base_dir=tmp_path_factory.mktemp("checkpoints"))


def test_sampler_logprobs_match_the_learner_on_smollm(service):
    client = service.create_lora_training_client("smollm2-135m-instruct", rank=16, seed=0)
    prompt = client.get_renderer().render([{"role": "user", "content": "Name a colour."}])
    sampler = client.save_weights_and_get_sampling_client()
    response = sampler.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=16, seed=1)
    ).result()
    for sequence in response.sequences:
        tokens = prompt + sequence.tokens
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[len(prompt) :]
        assert sequence.logprobs == pytest.approx(scored, abs=2e-3)


def test_two_debaters_recipe_trains_and_saves_two_different_adapters(smollm_loaded, tmp_path):
    spec = importlib.util.spec_from_file_location("two_debaters", EXAMPLE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    history, paths = asyncio.run(recipe.train(epochs=1, num_samples=2, max_tokens=8, base_dir=tmp_path))
    assert len(history) == 1 and all(loss == loss for loss in history[0]["loss"])  # finite, not NaN
    first, second = (load_file(str(Path(p) / "adapter_model.safetensors")) for p in paths)
    assert first.keys() == second.keys()
    assert any(not first[k].equal(second[k]) for k in first)
