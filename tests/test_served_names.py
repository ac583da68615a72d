"""One model under several names (`serve --model NAME=SOURCE`), and their tokenizers found by name offline.

What a Tinker cookbook recipe needs from `sparring serve` (the recipes themselves run in the opt-in
tests/test_cookbook.py): every served name is listed and accepted by both APIs, bad `--model` entries are one
line, and the hub-cache entries make `AutoTokenizer.from_pretrained(<served name>)` load the served model's
tokenizer without a network, leaving a real cache entry alone.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from sparring.cli import app as cli_app
from sparring.server import create_app, parse_served_base
from sparring.server.hub_cache import MARKER, repo_folder, write_tokenizer_entries

ALIAS = "Qwen/Qwen3.5-9B"


def offline_tokenizer(cache: Path, name: str):
    return AutoTokenizer.from_pretrained(name, cache_dir=str(cache), local_files_only=True)


def test_model_entries_give_one_source_and_its_names(tiny_model_dir, tmp_path):
    plain = parse_served_base([str(tiny_model_dir)])
    assert plain.source == str(tiny_model_dir) and plain.names == [str(tiny_model_dir)]
    named = parse_served_base([f"{ALIAS}={tiny_model_dir}", str(tiny_model_dir), f"policy={tiny_model_dir}/"])
    assert named.source == str(tiny_model_dir) and named.names == [ALIAS, str(tiny_model_dir), "policy"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    bad = {
        "=x": "takes SOURCE or NAME=SOURCE",
        "name=": "takes SOURCE or NAME=SOURCE",
        "a b=x": "no spaces",
        "x" * 129 + "=y": "at most 128",
    }
    for entry, message in bad.items():
        with pytest.raises(ValueError, match=message):
            parse_served_base([entry])
    with pytest.raises(ValueError, match="given more than once"):
        parse_served_base([f"a={tiny_model_dir}", f"a={tiny_model_dir}"])
    with pytest.raises(ValueError, match="loads one base model"):
        parse_served_base([str(tiny_model_dir), f"b={other}"])
    with pytest.raises(ValueError, match="unknown model 'no-such-model'"):
        parse_served_base([f"{ALIAS}=no-such-model"])


def test_serve_refuses_a_bad_model_entry_in_one_line(tiny_model_dir, tmp_path):
    for entry, message in [
        ("=x", "takes SOURCE or NAME=SOURCE"),
        (f"{ALIAS}=nowhere-model", "unknown model 'nowhere-model'"),
    ]:
        outcome = CliRunner().invoke(cli_app, ["serve", "--model", entry, "--tokenizer-cache", str(tmp_path)])
        assert outcome.exit_code == 2 and message in outcome.output and len(outcome.output.strip().splitlines()) == 1, (
            outcome.output
        )


def test_served_names_are_listed_and_answered_by_both_apis(tiny_model_dir, tmp_path):
    app = create_app(
        str(tiny_model_dir),
        base_dir=tmp_path / "base",
        served_names=[ALIAS, "policy"],
        tokenizer_cache=tmp_path / "hub",
    )

    async def calls():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            capabilities = (await client.get("/api/v1/get_server_capabilities")).json()
            session = (await client.post("/api/v1/create_session", json={})).json()["session_id"]
            created = (
                await client.post(
                    "/api/v1/create_model", json={"session_id": session, "model_seq_id": 0, "base_model": "policy"}
                )
            ).json()
            info = (await client.post("/api/v1/get_info", json={"model_id": created["model_id"]})).json()
            unknown = await client.post(
                "/api/v1/create_model", json={"session_id": session, "model_seq_id": 1, "base_model": "gpt-4o"}
            )
            listed = (await client.get("/v1/models")).json()
            chat = await client.post(
                "/v1/chat/completions",
                json={"model": ALIAS, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            )
        return capabilities, info, unknown, listed, chat

    capabilities, info, unknown, listed, chat = asyncio.run(calls())
    assert [model["model_name"] for model in capabilities["supported_models"]] == [ALIAS, "policy"]
    assert info["model_name"] == "policy" and info["model_data"]["tokenizer_id"] == str(tiny_model_dir)
    assert unknown.status_code == 400 and f"serves '{ALIAS}', 'policy'" in unknown.json()["detail"]
    assert sorted(model["id"] for model in listed["data"]) == [ALIAS, "policy"]
    assert chat.status_code == 200 and chat.json()["model"] == ALIAS
    assert [entry.name for entry in app.state.tokenizer_entries] == [ALIAS, "policy"]
    expected = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert offline_tokenizer(tmp_path / "hub", ALIAS).get_vocab() == expected.get_vocab()


def test_tokenizer_entries_load_offline_are_idempotent_and_never_replace_a_real_entry(tiny_model_dir, tmp_path):
    cache = tmp_path / "hub"
    real = repo_folder(cache, "org/real")
    (real / "refs").mkdir(parents=True)
    (real / "refs" / "main").write_text("0" * 40)
    first = write_tokenizer_entries(cache, tiny_model_dir, ["org/real", "tiny", "./not-a-repo-id", "a/b/c"], aliases=[])
    assert [entry.name for entry in first] == ["org/real", "tiny"]
    assert (
        first[0].snapshot is None
        and "left alone" in first[0].skipped
        and (real / "refs" / "main").read_text() == "0" * 40
    )
    assert not (real / MARKER).exists() and not (real / "snapshots").exists()
    tiny = offline_tokenizer(cache, "tiny")
    assert tiny.encode("hello world") == AutoTokenizer.from_pretrained(str(tiny_model_dir)).encode("hello world")
    assert not any(path.suffix == ".safetensors" for path in first[1].snapshot.iterdir())
    assert (
        write_tokenizer_entries(cache, tmp_path / "no-model-here", [str(tiny_model_dir)], aliases=[]) == []
    )  # paths: nothing to write
    again = write_tokenizer_entries(cache, tiny_model_dir, ["tiny"], aliases=[])
    assert (
        again[0].snapshot == first[1].snapshot and len(list((repo_folder(cache, "tiny") / "snapshots").iterdir())) == 1
    )


def test_an_alias_gets_single_think_tokens_from_spare_special_tokens(tiny_model_dir, tmp_path):
    model_dir = tmp_path / "model"
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<spare_a>", "<spare_b>", "<spare_c>"]})
    tokenizer.save_pretrained(str(model_dir))
    shutil.copy(tiny_model_dir / "config.json", model_dir / "config.json")
    spare_b, spare_c = tokenizer.convert_tokens_to_ids(["<spare_b>", "<spare_c>"])
    entries = write_tokenizer_entries(tmp_path / "hub", model_dir, ["own", ALIAS], aliases=[ALIAS])
    assert entries[0].markers == {} and entries[1].markers == {"<think>": spare_b, "</think>": spare_c}
    alias = offline_tokenizer(tmp_path / "hub", ALIAS)
    assert alias.encode("</think>", add_special_tokens=False) == [spare_c]
    assert alias.decode([spare_b, spare_c]) == "<think></think>" and len(alias) == len(tokenizer)
    assert alias.encode("hello", add_special_tokens=False) == tokenizer.encode("hello", add_special_tokens=False)
    own = offline_tokenizer(tmp_path / "hub", "own")
    assert own.decode([spare_c]) == "<spare_c>" and len(own.encode("</think>", add_special_tokens=False)) > 1
    assert json.loads((repo_folder(tmp_path / "hub", ALIAS) / MARKER).read_text())["markers"] == {
        "<think>": spare_b,
        "</think>": spare_c,
    }


def test_an_alias_of_a_tokenizer_without_spare_special_tokens_is_served_unchanged(tiny_model_dir, tmp_path, caplog):
    entries = write_tokenizer_entries(tmp_path / "hub", tiny_model_dir, [ALIAS], aliases=[ALIAS])
    assert entries[0].markers == {} and "too few unused special tokens" in caplog.text
    assert (
        offline_tokenizer(tmp_path / "hub", ALIAS).get_vocab()
        == AutoTokenizer.from_pretrained(str(tiny_model_dir)).get_vocab()
    )
