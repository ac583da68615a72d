"""Hermes-style tool calls as text: how a call is written, opened (prefill), closed, offered and parsed back.

The chat renderers (`renderer.py`) put these strings around the tokens; a reply forced to call a tool starts with
`tool_call_prefill(name)` and, when its arguments are held to a schema, ends with `tool_call_closing()`, so what
the model writes reads like any `format_tool_call` block.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
TOOL_CALL_OPEN = "<tool_call>\n"
TOOL_CALL_CLOSE = "</tool_call>"
ARGUMENTS_CLOSING = f"}}\n{TOOL_CALL_CLOSE}"
"""What follows a call's arguments object: the payload's closing brace and the closing tag."""


def tool_call_function(tool_call: dict) -> tuple[str, Any]:
    """(name, arguments as a JSON value) of an OpenAI-format (or flat) tool call."""
    function = tool_call.get("function", tool_call)
    name = function.get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool call {tool_call!r} has no function name")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # rendered verbatim as a JSON string
    return name, arguments


def format_tool_call(tool_call: dict) -> str:
    """One hermes-style block: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``."""
    name, arguments = tool_call_function(tool_call)
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{payload}\n{TOOL_CALL_CLOSE}"


def tool_call_prefill(name: str | None = None) -> str:
    """How a hermes-style tool call starts: the opening tag, and with ``name`` everything up to its arguments.

    ``format_tool_call`` of a call to ``name`` starts with exactly this text, so
    a reply prefilled with it and completed by the model reads like any call.
    """
    if name is None:
        return TOOL_CALL_OPEN
    return f'{TOOL_CALL_OPEN}{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '


def tool_call_closing(name: str | None = None) -> str:
    """What ends a hermes-style call after its sampled JSON: ``format_tool_call``'s text after the arguments
    object when ``name`` was prefilled (``tool_call_prefill(name)``), else after the whole ``{"name", "arguments"}``
    payload."""
    return ARGUMENTS_CLOSING if name is not None else f"\n{TOOL_CALL_CLOSE}"


def tools_system_section(tools: list[dict]) -> str:
    """The hermes/Qwen2.5 ``# Tools`` section appended to the system message."""
    tool_lines = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>{tool_lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split text into (content without tool-call blocks, OpenAI-format tool calls).

    Blocks whose JSON does not parse, or lacks a string ``name``, stay in the content.
    """
    tool_calls: list[dict] = []

    def take_block(match: re.Match) -> str:
        try:
            payload = json.loads(match.group(1).strip())
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return match.group(0)
        arguments = payload.get("arguments", payload.get("parameters", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        tool_calls.append(_function_call(len(tool_calls), payload["name"], arguments))
        return ""

    content = _TOOL_CALL_BLOCK.sub(take_block, text)
    return content.strip(), tool_calls


_CUT_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")(\s*,\s*"arguments"\s*:)?', re.DOTALL)


def parse_required_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Like ``parse_tool_calls`` for a reply prefilled with ``tool_call_prefill()`` (a call is required, the model picks
    the tool). A last call cut before its ``</tool_call>`` (by max_tokens) is still a call of the tool it names, with
    its arguments as far as they were sampled (empty when cut before them); one cut before its name is dropped: no
    markup comes back as text.
    """
    start = text.rfind(TOOL_CALL_OPEN)
    if start < 0 or TOOL_CALL_CLOSE in text[start:]:
        return parse_tool_calls(text)
    content, calls = parse_tool_calls(text[:start])
    head = _CUT_CALL_HEAD.match(text, start + len(TOOL_CALL_OPEN))
    if head is not None:
        arguments = _forced_arguments(text[head.end() :]) if head.group(2) else ""  # cut before its arguments
        calls.append(_function_call(len(calls), json.loads(head.group(1)), arguments))
    return content, calls


def _function_call(index: int, name: str, arguments: str) -> dict:
    return {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _forced_arguments(body: str) -> str:
    """The arguments of a forced call from the text sampled after its prefill (up to ``</tool_call>``).

    A JSON value followed by nothing but (a start of) the call's closing is the
    arguments, so a call cut by max_tokens inside its closing markup returns its
    arguments without it; anything else is kept verbatim (OpenAI's arguments are
    a string that may not be valid JSON), without the payload's closing brace
    and any cut closing tag.
    """
    text = body.strip()
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        value, end = None, -1
    if end >= 0 and ARGUMENTS_CLOSING.startswith(text[end:].strip()):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return _without_cut_closing(text).removesuffix("}").rstrip()


def _without_cut_closing(text: str) -> str:
    """``text`` without a start of ``</tool_call>`` it ends with (a call cut inside its closing tag)."""
    for size in range(len(TOOL_CALL_CLOSE), 1, -1):
        if text.endswith(TOOL_CALL_CLOSE[:size]):
            return text[:-size].rstrip()
    return text


def parse_forced_tool_call(text: str, name: str) -> tuple[str, list[dict]]:
    """Like ``parse_tool_calls`` for a reply that starts with ``tool_call_prefill(name)``.

    The first call is always a call of ``name`` (arguments as sampled, see
    ``_forced_arguments``); text and tool calls after its ``</tool_call>`` are
    parsed as usual.
    """
    prefill = tool_call_prefill(name)
    if not text.startswith(prefill):
        raise ValueError(f"a reply forced to call {name!r} must start with {prefill!r}")
    rest = text[len(prefill) :]
    close = rest.find(TOOL_CALL_CLOSE)
    body, after = (rest, "") if close < 0 else (rest[:close], rest[close + len(TOOL_CALL_CLOSE) :])
    content, more = parse_tool_calls(after)
    calls = [_function_call(0, name, _forced_arguments(body))]
    calls += [
        _function_call(index, call["function"]["name"], call["function"]["arguments"])
        for index, call in enumerate(more, start=1)
    ]
    return content, calls
