"""Chat renderers: OpenAI-style messages <-> token ids, with exact prefixes.

RL training merges an agent's successive model calls into one token sequence
when each call's prompt starts with the previous prompt plus the tokens that
were sampled for it.  Rendering the whole conversation again and tokenising
the text would break that: the sampled tokens are rarely the canonical
tokenisation of their text.  A ``ChatRenderer`` therefore has two ways in:

- ``render(messages)`` builds a prompt from scratch;
- ``extend(prefix_tokens, new_messages)`` appends only the tokens of new
  messages to an earlier prompt plus its sampled completion, never touching
  ``prefix_tokens`` (``result[:len(prefix_tokens)] == prefix_tokens``).

``parse_response`` turns sampled completion tokens back into an assistant
message, including hermes-style ``<tool_call>`` blocks.  A reply that must
call a tool is prefilled with the start of a call (``tool_call_prefill``: the
opening tag, or everything up to the arguments of a named function) and
parsed with that prefill, so a forced call is a tool call even when the
sampled arguments are not valid JSON.

``ChatMLRenderer`` builds tokens turn by turn for ``<|im_start|>``/``<|im_end|>``
models (SmolLM2, Qwen2.5) and matches ``tokenizer.apply_chat_template`` token
for token.  ``TemplateRenderer`` is the fallback for any other tokenizer with a
chat template.  ``get_renderer`` picks one.

Message ``name`` fields are accepted and ignored (neither SmolLM2 nor Qwen2.5
templates render them).  Each ``tool`` message becomes its own user turn
holding one ``<tool_response>`` block (Qwen2.5 groups consecutive tool
messages into one turn; separate turns keep ``extend`` exact).
"""

from __future__ import annotations

import abc
from typing import Any

from .tool_calls import (
    format_tool_call,
    parse_forced_tool_call,
    parse_required_tool_calls,
    parse_tool_calls,
    tool_call_closing,
    tool_call_function,
    tool_call_prefill,
    tools_system_section,
)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ROLES = ("system", "user", "assistant", "tool")
# Neutral placeholder contents used to probe what a chat template emits.
_PROBE_USER = "SPARRING_PROBE_USER"
_PROBE_REPLY = "SPARRING_PROBE_REPLY"


def _content_text(message: dict) -> str:
    """The message content as one string (None -> "", OpenAI text parts joined)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ValueError(f"message content part {part!r} is not a text part; only text is supported")
        return "".join(texts)
    raise ValueError(f"message content must be a string, got {type(content).__name__}")


def _check_role(message: Any) -> str:
    if not isinstance(message, dict):
        raise ValueError(f"each message must be a dict with 'role' and 'content', got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"message role must be one of {', '.join(ROLES)}; got {role!r}")
    return role


class ChatRenderer(abc.ABC):
    """Messages <-> token ids for one tokenizer; see the module docstring for the prefix contract."""

    tokenizer: Any
    stop_token_ids: list[int]

    @abc.abstractmethod
    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        """Token ids of the conversation; with the assistant generation prompt and ``prefill`` text appended."""

    @abc.abstractmethod
    def extend(
        self,
        prefix_tokens: list[int],
        new_messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        """``prefix_tokens`` (a prompt plus its sampled completion) followed by the new messages' tokens.

        Closes the assistant turn first when the completion lacks its end-of-turn token.
        """

    def encode_text(self, text: str) -> list[int]:
        """Plain tokenisation of text (no BOS/EOS added; special-token strings are matched)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def decode(self, tokens: list[int]) -> str:
        """Text of token ids, special tokens included."""
        return self.tokenizer.decode(list(tokens), skip_special_tokens=False)

    def tool_call_prefill(self, name: str | None = None) -> str:
        """The text that starts a reply which must call a tool (``name``, or one the model picks)."""
        return tool_call_prefill(name)

    def tool_call_closing(self, name: str | None = None) -> str:
        """The text that ends a forced call after its sampled JSON (what a constrained forced call is closed with):
        after the arguments of ``name``, or after the whole payload when the model picks the tool."""
        return tool_call_closing(name)

    def parse_response(
        self,
        completion_tokens: list[int],
        *,
        prefill: str = "",
        forced_tool: str | None = None,
        tool_calls: bool = True,
    ) -> dict:
        """The assistant message for sampled completion tokens (end-of-turn stripped, tool calls parsed).

        Pass the ``prefill`` the prompt was rendered with: it is part of the reply but not of the completion.
        ``forced_tool``: the prefill is ``tool_call_prefill(forced_tool)``, so the reply is a call of it
        whatever was sampled. ``tool_calls=False`` keeps tool-call text as plain content.
        """
        tokens = list(completion_tokens)
        while tokens and tokens[-1] in self.stop_token_ids:
            tokens.pop()
        text = prefill + self.decode(tokens)
        if forced_tool is not None:
            content, calls = parse_forced_tool_call(text, forced_tool)
        elif tool_calls and prefill == tool_call_prefill():
            content, calls = parse_required_tool_calls(text)
        elif tool_calls:
            content, calls = parse_tool_calls(text)
        else:
            content, calls = text.strip(), []
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return message

    def _check_prefill(self, add_generation_prompt: bool, prefill: str | None) -> None:
        if prefill and not add_generation_prompt:
            raise ValueError("prefill requires add_generation_prompt=True (it starts the assistant reply)")


def _single_token_id(tokenizer: Any, token: str) -> int | None:
    token_id = tokenizer.get_vocab().get(token)
    return int(token_id) if token_id is not None else None


class ChatMLRenderer(ChatRenderer):
    """Renderer for ``<|im_start|>role\\ncontent<|im_end|>\\n`` models, built turn by turn.

    Each turn is ``[<|im_start|>] + encode(role + "\\n" + body) + [<|im_end|>] + encode("\\n")``.
    Role and body are tokenised together because the chat template renders
    them as one text run between special tokens; that is what makes the result
    identical to ``apply_chat_template``.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        im_start_id = _single_token_id(tokenizer, IM_START)
        im_end_id = _single_token_id(tokenizer, IM_END)
        if im_start_id is None or im_end_id is None:
            raise ValueError(f"ChatMLRenderer needs {IM_START} and {IM_END} tokens in the vocabulary")
        self.im_start_id = im_start_id
        self.im_end_id = im_end_id
        self.newline_tokens = self.encode_text("\n")
        self.stop_token_ids = [im_end_id]
        eos_id = getattr(tokenizer, "eos_token_id", None)
        if eos_id is not None and eos_id not in self.stop_token_ids:
            self.stop_token_ids.append(int(eos_id))
        self.default_system_prompt = self._template_default_system_prompt()

    def _template_default_system_prompt(self) -> str | None:
        """The system prompt the tokenizer's template inserts when the first message is not a system one.

        Found by rendering a one-user-message probe through the template, so it
        works for any ChatML template (SmolLM2, Qwen2.5); None if there is none.
        """
        if not getattr(self.tokenizer, "chat_template", None):
            return None
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": _PROBE_USER}], tokenize=False, add_generation_prompt=False
            )
        except Exception:  # any template failure just means "no default system prompt"
            return None
        system_head = f"{IM_START}system\n"
        user_at = text.find(f"{IM_START}user\n{_PROBE_USER}")
        if not text.startswith(system_head) or user_at < 0:
            return None
        system_end = text.find(IM_END, len(system_head))
        if system_end < 0 or system_end > user_at:
            return None
        return text[len(system_head) : system_end]

    def _turn(self, role: str, body: str) -> list[int]:
        return [self.im_start_id, *self.encode_text(f"{role}\n{body}"), self.im_end_id, *self.newline_tokens]

    def _message_tokens(self, message: dict) -> list[int]:
        role = _check_role(message)
        content = _content_text(message)
        if role == "tool":
            return self._turn("user", f"<tool_response>\n{content}\n</tool_response>")
        if role == "assistant" and message.get("tool_calls"):
            blocks = [format_tool_call(call) for call in message["tool_calls"]]
            return self._turn("assistant", "\n".join(([content] if content else []) + blocks))
        return self._turn(role, content)

    def _generation_prompt(self, prefill: str | None) -> list[int]:
        # The prefill is tokenised on its own so that the bare generation
        # prompt stays a prefix of the prefilled one.
        return [self.im_start_id, *self.encode_text("assistant\n"), *self.encode_text(prefill or "")]

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        self._check_prefill(add_generation_prompt, prefill)
        messages = list(messages)
        for message in messages:
            _check_role(message)
        tokens: list[int] = []
        starts_with_system = bool(messages) and messages[0]["role"] == "system"
        if tools:
            system_text = _content_text(messages[0]) if starts_with_system else (self.default_system_prompt or "")
            if starts_with_system:
                messages = messages[1:]
            section = tools_system_section(tools)
            tokens += self._turn("system", f"{system_text}\n\n{section}" if system_text else section)
        elif messages and not starts_with_system and self.default_system_prompt is not None:
            tokens += self._turn("system", self.default_system_prompt)
        for message in messages:
            tokens += self._message_tokens(message)
        if add_generation_prompt:
            tokens += self._generation_prompt(prefill)
        return tokens

    def extend(
        self,
        prefix_tokens: list[int],
        new_messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        self._check_prefill(add_generation_prompt, prefill)
        prefix = list(prefix_tokens)
        if not prefix:
            return self.render(new_messages, add_generation_prompt=add_generation_prompt, prefill=prefill)
        tokens = list(prefix)
        turn_end = [self.im_end_id, *self.newline_tokens]
        if prefix[-len(turn_end) :] == turn_end:
            pass  # the prefix ends on a closed turn (a prompt rendered without generation prompt)
        elif prefix[-1] == self.im_end_id:
            tokens += self.newline_tokens
        else:
            # Cut by max_tokens, or stopped on another stop token (e.g. eos): close the turn.
            tokens += turn_end
        for message in new_messages:
            tokens += self._message_tokens(message)
        if add_generation_prompt:
            tokens += self._generation_prompt(prefill)
        return tokens


def _template_messages(messages: list[dict]) -> list[dict]:
    """Copies of messages in the shape HF chat templates expect (tool-call arguments as dicts)."""
    prepared = []
    for message in messages:
        _check_role(message)
        message = {**message, "content": _content_text(message)}
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                name, arguments = tool_call_function(call)
                calls.append({**call, "type": "function", "function": {"name": name, "arguments": arguments}})
            message["tool_calls"] = calls
        prepared.append(message)
    return prepared


class TemplateRenderer(ChatRenderer):
    """Fallback renderer for any tokenizer with a chat template, via ``apply_chat_template``.

    ``render`` is exactly the template's tokenisation.  ``extend`` cannot see
    the earlier messages, so it renders a stand-in conversation (one user
    message, one assistant reply) with and without the new messages and
    tokenises only the text the new messages add; the turn closer (the text
    the template puts after an assistant reply) is added when the prefix lacks
    it.  Caveat: templates whose output for later messages depends on the
    earlier ones (e.g. system prompts only allowed first, strict alternation,
    per-position markers) can give slightly different text than a full
    re-render would; ``extend`` raises if the template does not render the
    stand-in conversation as a prefix of the extended one.
    """

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template, so chat messages cannot be rendered")
        self.tokenizer = tokenizer
        self._stand_in = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_REPLY}]
        stand_in_text = self._template_text(self._stand_in, None, add_generation_prompt=False)
        self.turn_closer = stand_in_text[stand_in_text.rindex(_PROBE_REPLY) + len(_PROBE_REPLY) :]
        """Text the template writes after an assistant reply (e.g. ``</s>`` or ``<|eot_id|>``)."""
        self._stand_in_text = stand_in_text
        self.stop_token_ids = []
        eos_id = getattr(tokenizer, "eos_token_id", None)
        if eos_id is not None:
            self.stop_token_ids.append(int(eos_id))
        special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        closer_tokens = self.encode_text(self.turn_closer)
        if closer_tokens and closer_tokens[0] in special_ids and closer_tokens[0] not in self.stop_token_ids:
            self.stop_token_ids.append(int(closer_tokens[0]))

    def _template_text(self, messages: list[dict], tools, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            _template_messages(messages),
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        self._check_prefill(add_generation_prompt, prefill)
        text = self._template_text(list(messages), tools, add_generation_prompt)
        return self.encode_text(text) + self.encode_text(prefill or "")

    def _closing_text(self, prefix: list[int]) -> str:
        """What must follow the prefix so that its assistant turn is closed the template's way."""
        closer = self.turn_closer
        if not closer:
            return ""
        tail_text = self.decode(prefix[-16:])
        if tail_text.endswith(closer):
            return ""
        if prefix[-1] in self.stop_token_ids:
            last_text = self.decode(prefix[-1:])
            if closer.startswith(last_text):
                return closer[len(last_text) :]
        return closer

    def extend(
        self,
        prefix_tokens: list[int],
        new_messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
    ) -> list[int]:
        self._check_prefill(add_generation_prompt, prefill)
        prefix = list(prefix_tokens)
        if not prefix:
            return self.render(new_messages, add_generation_prompt=add_generation_prompt, prefill=prefill)
        extended_text = self._template_text(self._stand_in + list(new_messages), None, add_generation_prompt)
        if not extended_text.startswith(self._stand_in_text):
            raise NotImplementedError(
                "this chat template renders earlier turns differently once messages are added, "
                "so TemplateRenderer.extend cannot append to a token prefix exactly"
            )
        new_text = self._closing_text(prefix) + extended_text[len(self._stand_in_text) :]
        return prefix + self.encode_text(new_text) + self.encode_text(prefill or "")


def get_renderer(tokenizer: Any) -> ChatRenderer:
    """ChatMLRenderer when the vocabulary has ``<|im_start|>`` and ``<|im_end|>``, else TemplateRenderer."""
    vocab = tokenizer.get_vocab()
    if IM_START in vocab and IM_END in vocab:
        return ChatMLRenderer(tokenizer)
    return TemplateRenderer(tokenizer)
