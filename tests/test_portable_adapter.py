"""Portable adapters: a saved (and an exported) adapter names its base by hub id where the catalogue knows one, keeps
the local directory in sparring's own metadata, and loads with `AutoPeftModelForCausalLM` on a machine whose Hugging
Face cache holds the base under that id and where the original local path does not exist (nothing downloaded)."""

import json
import os
import shutil
import subprocess
import sys

from sparring import ServiceClient
from sparring.engine import export_adapter
from sparring.engine.adapters import BASE_MODEL_DIR_FILE, BASE_MODEL_FILE
from sparring.models import catalogue
from sparring.models.catalogue import ModelSpec

HUB_ID = "sparring-tests/Tiny-Chat"
LOAD = (
    "import sys; from peft import AutoPeftModelForCausalLM\n"
    "for path in sys.argv[1:]: print(path, type(AutoPeftModelForCausalLM.from_pretrained(path)).__name__)"
)
"""Loads each adapter named (one process for all: its start, importing peft, costs more than a tiny model's load)."""


def test_an_adapter_loads_by_hub_id_where_its_local_base_path_does_not_exist(tiny_model_dir, tmp_path, monkeypatch):
    local = shutil.copytree(tiny_model_dir, tmp_path / "local-weights")
    monkeypatch.setitem(
        catalogue.KNOWN_MODELS, "tiny-chat", lambda: ModelSpec(name="tiny-chat", kind="hf_dir", path=local)
    )
    monkeypatch.setitem(catalogue.HUB_IDS, "tiny-chat", HUB_ID)
    client = ServiceClient(base_dir=tmp_path / "server").create_lora_training_client("tiny-chat", rank=2)
    saved = client.save_weights_for_sampler("portable").result().path
    exported = export_adapter(saved, tmp_path / "exported")
    for adapter in (saved, exported):
        assert json.loads((tmp_path / adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_ID
        assert (tmp_path / adapter / BASE_MODEL_FILE).read_text().strip() == "tiny-chat"
        assert (tmp_path / adapter / BASE_MODEL_DIR_FILE).read_text().strip() == str(local)

    # Another machine: the base model in its Hugging Face cache under the hub id, the local directory gone.
    cache = tmp_path / "hf-cache"
    revision = "0" * 40
    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    shutil.copytree(local, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    shutil.rmtree(local)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home")}
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(saved), str(exported)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    for adapter in (saved, exported):
        assert f"{adapter} PeftModelForCausalLM" in loaded.stdout.splitlines(), loaded.stdout
