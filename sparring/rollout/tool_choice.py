"""OpenAI's `tool_choice` for sparring's local chat models.

`ToolChoice.of(tool_choice, tools)` checks an OpenAI `tool_choice` against
the tools of a call and says what the reply must do:

- `"auto"` (or None): the model may call a tool or answer in text;
- `"none"`: the model answers in text: the tools stay in the prompt (so the
  prompt, and the agent's timeline, is the same as under "auto") but the
  reply is not parsed for tool calls;
- `"required"`: the reply must call a tool: the local model's reply is
  prefilled with the opening of a tool call; with a single tool this is the
  same as forcing that tool;
- `{"type": "function", "function": {"name": NAME}}`: the reply must call
  NAME: the prefill runs up to NAME's arguments, so only they are sampled.

A forced call is constrained to its tool's schema, as vLLM's guided decoding
does, whether or not the tool says `strict: true`: a named (or only) function's
arguments to its `parameters`, and a "required" call among several tools to a
whole `{"name", "arguments"}` payload of one of them (`arguments_schema`). A
model that cannot constrain (a remote Tinker backend) samples a non-strict
forced call freely, and refuses a strict one. Under "auto" nothing is
constrained: a strict tool is offered like any other.

The prefill is part of the prompt (never trained); the sampled tokens alone
are the completion. Forcing needs tools, and a forced name must be one of
them: anything else is a `ValueError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

MODES = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolChoice:
    """What one reply must do with the tools it is offered."""

    mode: Literal["auto", "none", "required"] = "auto"
    """'auto': tool call or text; 'none': text only; 'required': a tool call."""
    function: str | None = None
    """The function a 'required' reply must call; None lets the model pick among the tools."""
    arguments_schema: dict | None = None
    """What a forced call's sampled JSON must match: the forced function's parameters, or, with no function named,
    a whole call of one of the tools; None (not forced) samples freely."""
    strict: bool = False
    """Whether the forced tool says `strict: true`: then a model that cannot constrain refuses instead of sampling
    the call freely."""

    @classmethod
    def of(cls, tool_choice: Any, tools: list[dict] | None) -> ToolChoice:
        """Validate an OpenAI `tool_choice` (None, a mode, or a named function) against `tools`."""
        names = tool_names(tools)
        if tool_choice is None or tool_choice in ("auto", "none"):
            return cls(tool_choice or "auto")
        if tool_choice == "required":
            if not names:
                raise ValueError("tool_choice 'required' needs tools to call, but no tools were given")
            if len(names) == 1:
                return cls("required", names[0], _arguments_schema(tools[0]), _is_strict(tools[0]))
            return cls("required", None, _any_call_schema(tools), any(_is_strict(tool) for tool in tools))
        name = _forced_name(tool_choice)
        if not names:
            raise ValueError(f"tool_choice forces function {name!r}, but no tools were given")
        if name not in names:
            raise ValueError(f"tool_choice forces function {name!r}, which is not one of the tools {names}")
        tool = tools[names.index(name)]
        return cls("required", name, _arguments_schema(tool), _is_strict(tool))

    @property
    def forces_call(self) -> bool:
        return self.mode == "required"


def tool_names(tools: list[dict] | None) -> list[str]:
    """The function names of OpenAI-style (or flat) tool definitions."""
    names = []
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"tool {tool!r} has no function name")
        names.append(name)
    return names


def _is_strict(tool: dict) -> bool:
    return bool(tool.get("function", tool).get("strict"))


def _arguments_schema(tool: dict) -> dict:
    """The schema a forced call's arguments are held to: the tool's parameters (any object when it gives none)."""
    function = tool.get("function", tool)
    parameters = function.get("parameters")
    if parameters is None and not function.get("strict"):
        return {"type": "object"}
    if not isinstance(parameters, dict):
        name = function["name"]
        raise ValueError(f"tool {name!r} needs a parameters schema (an object) to hold its forced arguments to")
    return parameters


def _any_call_schema(tools: list[dict]) -> dict:
    """A whole hermes-style call payload, `{"name": NAME, "arguments": ...}`, of any one of the tools."""
    calls = []
    for tool in tools:
        properties = {"name": {"const": tool.get("function", tool)["name"]}, "arguments": _arguments_schema(tool)}
        required = ["name", "arguments"]
        calls.append({"type": "object", "properties": properties, "required": required, "additionalProperties": False})
    return {"anyOf": calls}


def _forced_name(tool_choice: Any) -> str:
    function = (
        tool_choice.get("function") if isinstance(tool_choice, dict) and tool_choice.get("type") == "function" else None
    )
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"tool_choice must be one of {list(MODES)} or {{'type': 'function', 'function': {{'name': "
            f"NAME}}}}; got {tool_choice!r}"
        )
    return name
