"""Chat renderers: token-exact agreement with the chat template, prefix-exact extend, response parsing."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from sparring.models.renderer import ChatMLRenderer, TemplateRenderer, get_renderer
from sparring.models.tool_calls import format_tool_call, parse_forced_tool_call, parse_tool_calls, tool_call_prefill

SMOLLM_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello there!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Pick a number between 1 and 10."},
        {"role": "assistant", "content": "I pick 7."},
        {"role": "user", "content": "Higher or lower than 5?"},
    ],
    "whitespace": [
        {"role": "system", "content": "  leading and trailing spaces  "},
        {"role": "user", "content": "\n\nstarts with newlines\n and ends with spaces   "},
        {"role": "assistant", "content": " x\n\n"},
        {"role": "user", "content": "\t tab\r\nand CRLF"},
    ],
    "unicode_digits": [
        {"role": "user", "content": "Café naïve — 東京 🚀 12345 3.14 -7 $20"},
        {"role": "assistant", "content": "Ünïcödé 0.5% 2024-01-01"},
        {"role": "user", "content": "ok?"},
    ],
    "near_empty": [
        {"role": "user", "content": "\n"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": " "},
    ],
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(params=["tiny", pytest.param("smollm", marks=pytest.mark.smollm)])
def loaded(request):
    return request.getfixturevalue("tiny_loaded" if request.param == "tiny" else "smollm_loaded")


def template_ids(tokenizer, messages, add_generation_prompt):
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def test_get_renderer_picks_chatml(loaded):
    assert isinstance(loaded.renderer, ChatMLRenderer)
    assert isinstance(get_renderer(loaded.tokenizer), ChatMLRenderer)
    im_end = loaded.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in loaded.renderer.stop_token_ids
    assert loaded.tokenizer.eos_token_id in loaded.renderer.stop_token_ids


def test_default_system_prompt_read_from_template(loaded):
    assert loaded.renderer.default_system_prompt == SMOLLM_DEFAULT_SYSTEM


def test_no_default_system_prompt_when_template_has_none(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    renderer = ChatMLRenderer(tokenizer)
    assert renderer.default_system_prompt is None
    messages = CONVERSATIONS["multi_turn"]
    assert renderer.render(messages) == template_ids(tokenizer, messages, True)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_render_matches_chat_template_token_for_token(loaded, name, add_generation_prompt):
    messages = CONVERSATIONS[name]
    expected = template_ids(loaded.tokenizer, messages, add_generation_prompt)
    assert loaded.renderer.render(messages, add_generation_prompt=add_generation_prompt) == expected


def test_prefill_appends_exactly_its_text(loaded):
    renderer = loaded.renderer
    messages = CONVERSATIONS["system_user"]
    prompt = renderer.render(messages)
    prefilled = renderer.render(messages, prefill="Sure! The answer is")
    assert prefilled[: len(prompt)] == prompt
    assert renderer.decode(prefilled[len(prompt) :]) == "Sure! The answer is"
    assert renderer.decode(prompt).endswith("<|im_start|>assistant\n")
    completion = renderer.encode_text(" 4.") + [renderer.im_end_id]
    reply = renderer.parse_response(completion, prefill="Sure! The answer is")
    assert reply == {"role": "assistant", "content": "Sure! The answer is 4."}


def test_prefill_without_generation_prompt_is_an_error(loaded):
    with pytest.raises(ValueError, match="prefill"):
        loaded.renderer.render(CONVERSATIONS["single_user"], add_generation_prompt=False, prefill="x")


def test_unknown_role_is_an_error(loaded):
    with pytest.raises(ValueError, match="role"):
        loaded.renderer.render([{"role": "wizard", "content": "hi"}])


def test_extend_with_canonical_completion_equals_full_render(loaded):
    renderer = loaded.renderer
    conversation = CONVERSATIONS["multi_turn"]
    prompt = renderer.render(conversation)
    completion = renderer.encode_text("some reply") + [renderer.im_end_id]
    prefix = prompt + completion
    follow_up = {"role": "user", "content": "And then?"}

    extended = renderer.extend(prefix, [follow_up])

    assert extended[: len(prefix)] == prefix
    full = conversation + [{"role": "assistant", "content": "some reply"}, follow_up]
    assert extended == renderer.render(full)
    assert extended == template_ids(loaded.tokenizer, full, True)


def test_extend_closes_a_turn_cut_by_max_tokens(loaded):
    renderer = loaded.renderer
    conversation = CONVERSATIONS["single_user"]
    prompt = renderer.render(conversation)
    prefix = prompt + renderer.encode_text("a reply that got cut")
    follow_up = {"role": "user", "content": "You were cut off."}

    extended = renderer.extend(prefix, [follow_up])

    assert extended[: len(prefix)] == prefix
    assert extended[len(prefix)] == renderer.im_end_id
    full = conversation + [{"role": "assistant", "content": "a reply that got cut"}, follow_up]
    assert extended == renderer.render(full)


def test_extend_never_retokenises_a_non_canonical_prefix(loaded):
    renderer = loaded.renderer
    prompt = renderer.render(CONVERSATIONS["single_user"])
    # One token per character: a valid sample, but not how "reply text" tokenises.
    completion = [token for char in "reply text" for token in renderer.encode_text(char)] + [renderer.im_end_id]
    prefix = prompt + completion

    extended = renderer.extend(prefix, [{"role": "user", "content": "next"}], prefill="Well,")

    assert extended[: len(prefix)] == prefix
    assert renderer.decode(extended[len(prefix) :]) == (
        "\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\nWell,"
    )


def test_extend_a_prompt_rendered_without_generation_prompt(loaded):
    renderer = loaded.renderer
    conversation = CONVERSATIONS["system_user"]
    prefix = renderer.render(conversation, add_generation_prompt=False)
    extra = [{"role": "assistant", "content": "4"}, {"role": "user", "content": "Thanks"}]
    extended = renderer.extend(prefix, extra, add_generation_prompt=False)
    assert extended == renderer.render(conversation + extra, add_generation_prompt=False)


def test_parse_plain_text_strips_end_of_turn(loaded):
    renderer = loaded.renderer
    tokens = renderer.encode_text("  Hello world, 42!\n") + [renderer.im_end_id]
    assert renderer.parse_response(tokens) == {"role": "assistant", "content": "Hello world, 42!"}
    assert renderer.parse_response(renderer.encode_text("cut off")) == {"role": "assistant", "content": "cut off"}


def test_parse_one_tool_call(loaded):
    renderer = loaded.renderer
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    message = renderer.parse_response(renderer.encode_text(text) + [renderer.im_end_id])
    assert message["content"] == "Let me check."
    assert message["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]


def test_parse_two_tool_calls():
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "CET", "hours": 24}}</tool_call>'
    )
    content, tool_calls = parse_tool_calls(text)
    assert content == ""
    assert [call["id"] for call in tool_calls] == ["call_0", "call_1"]
    assert [call["function"]["name"] for call in tool_calls] == ["get_weather", "get_time"]
    assert json.loads(tool_calls[1]["function"]["arguments"]) == {"zone": "CET", "hours": 24}


def test_malformed_tool_call_stays_in_content(loaded):
    renderer = loaded.renderer
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {city: Paris}\n</tool_call>'
    unclosed = 'ok <tool_call>\n{"name": "get_weather"'
    for text in (broken, unclosed, "<tool_call>[1, 2]</tool_call>"):
        message = renderer.parse_response(renderer.encode_text(text) + [renderer.im_end_id])
        assert message == {"role": "assistant", "content": text.strip()}


def test_tools_are_described_in_the_system_message(loaded):
    renderer = loaded.renderer
    text = renderer.decode(renderer.render(CONVERSATIONS["single_user"], tools=[WEATHER_TOOL]))
    system_turn = text.split("<|im_end|>")[0]
    assert system_turn.startswith(f"<|im_start|>system\n{SMOLLM_DEFAULT_SYSTEM}\n\n# Tools")
    assert f"<tools>\n{json.dumps(WEATHER_TOOL)}\n</tools>" in system_turn
    assert "<tool_call></tool_call>" in system_turn

    with_system = renderer.decode(renderer.render(CONVERSATIONS["system_user"], tools=[WEATHER_TOOL]))
    assert with_system.startswith("<|im_start|>system\nYou are a terse assistant.\n\n# Tools")
    assert with_system.count("<|im_start|>system") == 1


def test_tool_call_and_tool_response_render_and_round_trip(loaded):
    renderer = loaded.renderer
    call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}
    assistant = {"role": "assistant", "content": "Checking.", "tool_calls": [call]}
    tool = {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": '{"temp": 18}'}
    conversation = [{"role": "user", "content": "Weather in Zürich?"}, assistant, tool]

    text = renderer.decode(renderer.render(conversation, tools=[WEATHER_TOOL]))
    assert (
        "<|im_start|>assistant\nChecking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"temp": 18}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    ) in text

    prompt = renderer.render(conversation[:1], tools=[WEATHER_TOOL])
    with_reply = renderer.render(conversation[:2], tools=[WEATHER_TOOL], add_generation_prompt=False)
    assert with_reply[: len(prompt)] == prompt
    completion = with_reply[len(prompt) : -len(renderer.newline_tokens)]
    assert completion[-1] == renderer.im_end_id
    assert renderer.parse_response(completion) == assistant

    extended = renderer.extend(prompt + completion, [tool])
    assert extended == renderer.render(conversation, tools=[WEATHER_TOOL])


def test_tool_call_without_content_starts_the_reply():
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert format_tool_call(call) == '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'


def test_tool_call_prefills_are_how_a_formatted_call_starts():
    call = {"type": "function", "function": {"name": "get_wéather", "arguments": {"city": "Paris"}}}
    assert format_tool_call(call).startswith(tool_call_prefill("get_wéather"))
    assert tool_call_prefill("get_wéather").startswith(tool_call_prefill()) and tool_call_prefill() == "<tool_call>\n"
    assert tool_call_prefill('say "hi"').endswith('{"name": "say \\"hi\\"", "arguments": ')  # the name is JSON-quoted


def test_a_forced_reply_is_a_call_of_the_forced_tool_whatever_was_sampled(loaded):
    renderer = loaded.renderer
    prefill = renderer.tool_call_prefill("get_weather")
    prompt = renderer.render(CONVERSATIONS["single_user"], tools=[WEATHER_TOOL], prefill=prefill)
    assert renderer.decode(prompt).endswith("<|im_start|>assistant\n" + prefill)

    def reply(sampled: str) -> dict:
        message = renderer.parse_response(
            renderer.encode_text(sampled) + [renderer.im_end_id], prefill=prefill, forced_tool="get_weather"
        )
        assert [call["function"]["name"] for call in message["tool_calls"]][:1] == ["get_weather"]
        return message

    assert json.loads(reply('{"city": "Paris"}}\n</tool_call>')["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert (
        reply('{"city": "Paris"}')["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    )  # cut before the closing brace
    assert reply("garbage {")["tool_calls"][0]["function"]["arguments"] == "garbage {"  # kept as sampled
    assert reply('{"city": 1}} xyz</tool_call>')["tool_calls"][0]["function"]["arguments"] == '{"city": 1}} xyz'
    more = reply('{}}\n</tool_call>\nAlso <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    assert more["content"] == "Also" and [(c["id"], c["function"]["name"]) for c in more["tool_calls"]] == [
        ("call_0", "get_weather"),
        ("call_1", "get_time"),
    ]
    with pytest.raises(ValueError, match="get_time"):
        parse_forced_tool_call('{"city": "Paris"}}', "get_time")


def test_a_forced_call_cut_by_max_tokens_returns_no_markup(loaded):
    renderer = loaded.renderer
    named = renderer.tool_call_prefill("get_weather")

    def forced(sampled: str, prefill: str = named) -> dict:
        tool = "get_weather" if prefill == named else None
        return renderer.parse_response(renderer.encode_text(sampled), prefill=prefill, forced_tool=tool)

    for cut in (
        "}",
        "}\n",
        "}\n</",
        "}\n</tool_",
        "}\n</tool_call",
    ):  # the issue's `{"city": "Paris", "days": 3}}\n</tool_`
        (call,) = forced('{"city": "Paris", "days": 3}' + cut)["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert (
        forced('{"city": "Par')["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'
    )  # cut inside: as sampled
    assert forced("not json}\n</tool_")["tool_calls"][0]["function"]["arguments"] == "not json"
    # "required" among several tools: the model names the tool; a call cut before its closing tag is still that call
    required = renderer.tool_call_prefill()
    whole = forced('{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>', required)
    assert whole["content"] == "" and whole["tool_calls"][0]["function"] == {
        "name": "get_time",
        "arguments": '{"zone": "UTC"}',
    }
    cut = forced('{"name": "get_time", "arguments": {"zone": "UTC"}}\n</to', required)
    assert cut["content"] == "" and cut["tool_calls"][0]["function"] == {
        "name": "get_time",
        "arguments": '{"zone": "UTC"}',
    }
    assert (
        forced('{"name": "get_time", "arguments": {"zo', required)["tool_calls"][0]["function"]["arguments"] == '{"zo'
    )
    assert forced('{"name": "get_time",', required)["tool_calls"][0]["function"] == {
        "name": "get_time",
        "arguments": "",
    }
    assert forced('{"na', required) == {"role": "assistant", "content": ""}  # cut before the name: no call, no markup


def test_tool_calls_can_be_left_as_text(loaded):
    renderer = loaded.renderer
    text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    tokens = renderer.encode_text(text) + [renderer.im_end_id]
    assert renderer.parse_response(tokens, tool_calls=False) == {"role": "assistant", "content": text}
    assert renderer.parse_response(tokens)["tool_calls"]


# A Zephyr-style template: no <|im_start|>, so TemplateRenderer is the renderer for it.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


@pytest.fixture
def template_renderer(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = ZEPHYR_TEMPLATE
    return TemplateRenderer(tokenizer)


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_template_renderer_matches_chat_template(template_renderer, name):
    messages = CONVERSATIONS[name]
    for add_generation_prompt in (True, False):
        expected = template_ids(template_renderer.tokenizer, messages, add_generation_prompt)
        assert template_renderer.render(messages, add_generation_prompt=add_generation_prompt) == expected


def test_template_renderer_extend(template_renderer):
    renderer = template_renderer
    eos = renderer.tokenizer.eos_token_id
    assert renderer.turn_closer == "<|im_end|>\n"
    assert eos in renderer.stop_token_ids
    conversation = CONVERSATIONS["multi_turn"]
    follow_up = {"role": "user", "content": "And then?"}
    full = conversation + [{"role": "assistant", "content": "some reply"}, follow_up]
    prompt = renderer.render(conversation)

    for completion in (renderer.encode_text("some reply") + [eos], renderer.encode_text("some reply")):
        prefix = prompt + completion
        extended = renderer.extend(prefix, [follow_up])
        assert extended[: len(prefix)] == prefix
        assert extended == renderer.render(full)

    closed = renderer.render(conversation, add_generation_prompt=False)
    assert renderer.extend(closed, [follow_up]) == renderer.render(conversation + [follow_up])
    assert renderer.parse_response(renderer.encode_text("hi") + [eos]) == {"role": "assistant", "content": "hi"}
