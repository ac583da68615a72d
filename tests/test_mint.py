"""MinT's own client trains two debaters against `sparring serve`.

examples/mint_debate.py is MinT's multi-agent debate recipe written for
`import mint` (mindlab-toolkit 0.2.0, the tinker 0.22 SDK underneath). It
runs here unmodified, in a subprocess with mindlab-toolkit from a cached
overlay, pointed at a `sparring serve` process on the tiny model by the
environment alone (MINT_BASE_URL, a `tml-` MINT_API_KEY, MINT_BASE_MODEL):
one epoch, two topics, so each debater takes two PPO steps. The test checks
what the recipe promises: both losses finite, both debaters' adapters saved
and trained (LoRA B starts at zero, so a non-zero B means an optimizer step
moved it), and a sampler on each saved adapter sampled. MinT's own
extension endpoints (`mint.mint`) get a 404 that says what they are.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pip_overlay import pinned, pip_overlay
from safetensors.torch import load_file
from sparring_server import serving

RECIPE = Path(__file__).parent.parent / "examples" / "mint_debate.py"
API_KEY = "tml-sparring-mint"


@pytest.fixture(scope="session")
def mint_overlay(request, tmp_path_factory) -> Path:
    """mindlab-toolkit and the tinker it pins, kept in the pytest cache (built for this run only under -p
    no:cacheprovider)."""
    cache = getattr(request.config, "cache", None)
    return pip_overlay(
        pinned("mint"), cache.mkdir("mint-overlay") if cache is not None else tmp_path_factory.mktemp("mint-overlay")
    )


def run_recipe(overlay: Path, url: str, base_model: str, report: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TINKER_", "MINT_"))}
    env.update(
        PYTHONPATH=str(overlay),
        MINT_BASE_URL=url,
        MINT_API_KEY=API_KEY,
        MINT_BASE_MODEL=base_model,
        MINT_LORA_RANK="4",
        HF_HUB_OFFLINE="1",
    )
    command = [
        sys.executable,
        str(RECIPE),
        "--epochs",
        "1",
        "--arguments",
        "2",
        "--max-tokens",
        "6",
        "--report",
        str(report),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    """A `sparring serve` process on the tiny model, keyed as MinT's client needs it (tml-)."""
    with serving(tiny_model_dir, tmp_path_factory.mktemp("server"), API_KEY) as running:
        yield running


def test_mint_debate_recipe_trains_both_debaters_against_sparring_serve(served, tiny_model_dir, tmp_path, mint_overlay):
    report = tmp_path / "report.json"
    done = run_recipe(mint_overlay, served.url, str(tiny_model_dir), report)
    assert done.returncode == 0, f"the MinT recipe failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert "mindlab-toolkit==0.2.0" in (mint_overlay / "installed").read_text().splitlines()
    found = json.loads(report.read_text())
    assert [len(side) for side in found["losses"]] == [2, 2]
    assert all(math.isfinite(loss) and loss != 0.0 for side in found["losses"] for loss in side)
    assert len(set(found["paths"])) == 2 and all(path.startswith("tinker://") for path in found["paths"])
    for path in found["paths"]:
        weights_key, kind, name = path.removeprefix("tinker://").split("/")
        adapter = load_file(served.base_dir / weights_key / kind / name / "adapter_model.safetensors")
        lora_b = {key: tensor for key, tensor in adapter.items() if "lora_B" in key}
        assert lora_b and all(tensor.abs().max() > 0 for tensor in lora_b.values()), f"{path}: a LoRA B is still zero"
    assert [argument["path"] for argument in found["arguments"]] == found["paths"] and all(
        argument["tokens"] > 0 for argument in found["arguments"]
    )


def test_mint_only_extensions_get_a_404_that_names_them(served):
    for endpoint in ("forward_backward_reverse_kl", "checkpoints/interpolate"):
        answer = httpx.post(f"{served.url}/api/v1/mint/{endpoint}", json={}, headers={"X-API-Key": API_KEY}, timeout=30)
        assert (
            answer.status_code == 404
            and "MinT-only extension" in answer.json()["detail"]
            and endpoint in answer.json()["detail"]
        )
