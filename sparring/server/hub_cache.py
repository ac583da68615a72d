"""Tokenizers by served name, offline: Hugging Face hub-cache entries for `sparring serve`'s names.

A client that looks a tokenizer up by model name (`AutoTokenizer.from_pretrained("Qwen/Qwen3.5-9B")`, the
Tinker cookbook's `get_tokenizer`, the SDK's `SamplingClient.get_tokenizer()`) reads the Hugging Face hub cache
when it runs offline (`HF_HUB_OFFLINE=1`): `<cache>/models--ORG--NAME/refs/main` holds a revision and
`snapshots/<revision>/` the files. `write_tokenizer_entries` writes one such entry per served name, holding the
served model's tokenizer files (never its weights), so pointing the client at the cache
(`HF_HUB_CACHE=<cache>`) makes every served name resolve to the tokenizer of the model behind it, with no edit
of the client.

An entry this module wrote carries a `sparring.json` marker and is brought up to date on every start; an entry
without the marker (one the hub wrote: a real model's files) is never touched, so even a user's own cache
stays intact.

Chat markers: chat renderers written for reasoning models (the cookbook's Qwen3 / Qwen3.5 renderers) need
`<think>` and `</think>` to be single tokens. When a served name is an alias of a model whose tokenizer has no
such tokens (SmolLM2), its entry gives those strings the ids of special tokens the model's chat format never
uses (the highest-numbered ones), so the ids stay inside the model's vocabulary; the model's own name keeps its
tokenizer unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

MARKER = "sparring.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "config.json",
    "generation_config.json",
)
"""The files of a model directory a tokenizer lookup reads (weights are never copied)."""
REASONING_MARKERS = ("<think>", "</think>")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")


@dataclass(frozen=True)
class TokenizerEntry:
    """What `write_tokenizer_entries` did for one served name."""

    name: str
    """The served name (a Hugging Face repo id)."""
    snapshot: Path | None
    """The snapshot directory holding its tokenizer; None when the entry was left alone."""
    skipped: str = ""
    """Why no entry was written (a real hub entry of that name exists); empty when written."""
    markers: dict[str, int] = field(default_factory=dict)
    """Chat markers given existing special-token ids in this entry (`with_chat_markers`), by string."""


def repo_folder(cache_dir: Path, name: str) -> Path:
    """Where the hub cache keeps repo `name` (`models--ORG--NAME`)."""
    return cache_dir / ("models--" + name.replace("/", "--"))


def is_repo_id(name: str) -> bool:
    """Whether `name` is a name a hub lookup would take as a repo id (not a path)."""
    return bool(REPO_ID.match(name)) and ".." not in name and not Path(name).exists()


def write_tokenizer_entries(
    cache_dir: Path, model_dir: Path, names: Sequence[str], aliases: Sequence[str]
) -> list[TokenizerEntry]:
    """One hub-cache entry per repo-id-like name in `names`, holding the tokenizer files of `model_dir`.

    Names in `aliases` (served names other than the model's own) get the chat markers when the tokenizer lacks them.
    """
    repo_names = [name for name in dict.fromkeys(names) if is_repo_id(name)]
    if not repo_names:
        return []
    files = {name: (model_dir / name).read_bytes() for name in TOKENIZER_FILES if (model_dir / name).is_file()}
    if "tokenizer.json" not in files and "tokenizer_config.json" not in files:
        raise ValueError(f"{model_dir}: no tokenizer files to serve by name (tokenizer.json / tokenizer_config.json)")
    entries = []
    for name in repo_names:
        content, markers = with_chat_markers(files) if name in aliases else (files, {})
        entries.append(_write_entry(cache_dir, name, model_dir, content, markers))
    return entries


def _write_entry(
    cache_dir: Path, name: str, model_dir: Path, files: dict[str, bytes], markers: dict[str, int]
) -> TokenizerEntry:
    folder = repo_folder(cache_dir, name)
    if folder.exists() and not (folder / MARKER).is_file():
        return TokenizerEntry(name, None, skipped=f"{folder} is a real Hugging Face cache entry; left alone")
    digest = hashlib.sha1()
    for file_name in sorted(files):
        digest.update(file_name.encode() + b"\0" + files[file_name] + b"\0")
    revision = digest.hexdigest()
    snapshot = folder / "snapshots" / revision
    if not snapshot.is_dir():
        staging = folder / "snapshots" / f".{revision}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for file_name, content in files.items():
            (staging / file_name).write_bytes(content)
        staging.rename(snapshot)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    marker = {"written_by": "sparring serve", "source": str(model_dir), "revision": revision, "markers": markers}
    (folder / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    return TokenizerEntry(name, snapshot, markers=markers)


def with_chat_markers(files: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, int]]:
    """`files` with `<think>` / `</think>` given unused special-token ids when the tokenizer has no such tokens.

    Returns the files unchanged (and no markers) when both are single tokens already, when there is no
    `tokenizer.json` to edit, or when the model has too few special tokens its chat format leaves unused.
    """
    if "tokenizer.json" not in files:
        return files, {}
    tokenizer = json.loads(files["tokenizer.json"])
    config = json.loads(files.get("tokenizer_config.json", b"{}"))
    vocab = tokenizer.get("model", {}).get("vocab")
    added = tokenizer.get("added_tokens", [])
    if not isinstance(vocab, dict):
        return files, {}
    known = set(vocab) | {token["content"] for token in added}
    missing = [marker for marker in REASONING_MARKERS if marker not in known]
    if not missing:
        return files, {}
    template = files.get("chat_template.jinja", b"").decode() + str(config.get("chat_template", ""))
    roles = {str(config.get(key)) for key in ("bos_token", "eos_token", "pad_token", "unk_token")}
    spare = [
        token
        for token in added
        if token.get("special") and token["content"] not in roles and token["content"] not in template
    ]
    if len(spare) < len(missing):
        logger.warning(
            "the tokenizer has no %s and too few unused special tokens to give them; served as is", " ".join(missing)
        )
        return files, {}
    markers = {}
    for marker, token in zip(missing, sorted(spare, key=lambda token: token["id"])[-len(missing) :], strict=True):
        old = token["content"]
        markers[marker] = token["id"]
        token["content"] = marker
        if vocab.get(old) == token["id"]:
            vocab[marker] = vocab.pop(old)
        for key in ("additional_special_tokens", "extra_special_tokens"):
            if isinstance(config.get(key), list):
                config[key] = [marker if item == old else item for item in config[key]]
        decoder = config.get("added_tokens_decoder", {})
        if isinstance(decoder.get(str(token["id"])), dict):
            decoder[str(token["id"])]["content"] = marker
    changed = {**files, "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False).encode()}
    if "tokenizer_config.json" in files:
        changed["tokenizer_config.json"] = json.dumps(config, indent=2, ensure_ascii=False).encode()
    return changed, markers
