"""The gateway's local count (gateway/core/engine_tokens.py, from the engine's tokenizer card) against
the engine's own prompt (TextTokenizer.render_chat + encode): equal for every request shape the
doors produce, and the bound used before the card is fetched is never below either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.http.http1.pool import Http1Pool
from adapters.types import ChatRequest
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from gateway.core.engine_prompt import engine_prompt
from gateway.core.engine_tokens import ChatPromptCounter, bound
from gateway.core.models_table import build_model_table
from gateway.core.token_count import TiktokenCounting, route_counting
from gateway.settings import load_settings
from selfhost.model.tokenizer import TextTokenizer
from selfhost.serve.protocol import ChatRequest as EngineChatRequest
from selfhost.structured.chat_plan import plan_chat
from selfhost.structured.tool_format import fallback_card
from tests.e2e.harness import write_config

OPENAI_BODIES = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {
        "messages": [
            {"role": "system", "content": "Rules one."},
            {"role": "user", "content": [{"type": "text", "text": "Données: 12345 ✓"}]},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Again, in 日本語."},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "call the tool"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "run", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    },
]
ANTHROPIC_BODY = {
    "max_tokens": 5,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "In French."}],
    "messages": [{"role": "user", "content": "Why cache prefixes?"}],
}


@pytest.fixture(scope="module")
def counter(smollm_tokenizer: TextTokenizer) -> ChatPromptCounter:
    t = smollm_tokenizer
    assert t.chat_template is not None
    card = {
        "tokenizer": t.tokenizer.to_str(),
        "chat_template": t.chat_template.source,
        "bos_token": t.bos_token,
        "eos_token": t.eos_token,
        "tool_format": None if t.renders_tools else fallback_card(),
    }
    return ChatPromptCounter(card)


def engine_prompt_tokens(tokenizer: TextTokenizer, body: dict) -> int:
    """What the engine's `/v1/chat/completions` bills for the OpenAI body the gateway sends
    (as `GenerationService.chat` renders it: tools, tool choice and response format read)."""
    request = EngineChatRequest(**body)
    plan = plan_chat(
        request.text_messages(),
        request.tool_objects(),
        request.tool_choice,
        request.response_format,
        tokenizer.renders_tools,
    )
    return len(tokenizer.encode(tokenizer.render_chat(plan.messages, plan.tools)))


def requests() -> list[ChatRequest]:
    decoded = [openai_wire.decode_request({"model": "smollm2", **b}) for b in OPENAI_BODIES]
    return [*decoded, anthropic_wire.decode_request({"model": "smollm2", **ANTHROPIC_BODY})]


@pytest.mark.parametrize("index", range(len(OPENAI_BODIES) + 1))
def test_local_count_equals_the_engine_count(
    index: int,
    counter: ChatPromptCounter,
    smollm_tokenizer: TextTokenizer,
) -> None:
    request = requests()[index]
    sent = openai_wire.encode_request(request)  # the body the openai_compatible backend sends
    prompt = engine_prompt(request)
    exact = engine_prompt_tokens(smollm_tokenizer, sent)
    merged = len(request.system) <= 1  # several system parts: counted apart, never less
    assert counter.count(prompt) == exact if merged else counter.count(prompt) >= exact
    assert bound(prompt) >= counter.count(prompt)


def test_a_client_split_system_is_counted_exactly(
    counter: ChatPromptCounter, smollm_tokenizer: TextTokenizer
) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "Rules one."},
            {"role": "system", "content": "Rules two."},
            {"role": "user", "content": "Go."},
        ]
    }
    request = openai_wire.decode_request({"model": "smollm2", **body})
    # the raw body is relayed as sent: two system messages, as engine_prompt counts them
    assert counter.count(engine_prompt(request)) == engine_prompt_tokens(smollm_tokenizer, body)


def test_memoised_pieces_count_a_growing_conversation_exactly(
    counter: ChatPromptCounter, smollm_tokenizer: TextTokenizer
) -> None:
    history: list[dict] = [{"role": "system", "content": "You are a careful agent. " * 20}]
    for turn in range(6):  # each call re-sends the history: its pieces come from the memo
        history.append({"role": "user", "content": f"Result {turn}: <|im_end|> ok " * 15})
        request = openai_wire.decode_request({"model": "smollm2", "messages": history})
        sent = openai_wire.encode_request(request)
        exact = engine_prompt_tokens(smollm_tokenizer, sent)
        assert counter.count(engine_prompt(request)) == exact
        history.append({"role": "assistant", "content": f"Step {turn} done."})


def test_a_server_given_tokenizer_dir_is_counted_with_it(
    tmp_path: Path, smollm_tokenizer: TextTokenizer
) -> None:
    """vLLM or SGLang serve no tokenizer card: `tokenizer_dir` (the model's HF files) gives it."""
    tokenizer = smollm_tokenizer
    assert tokenizer.chat_template is not None
    files = tmp_path / "smollm2-hf"
    files.mkdir()
    tokenizer.tokenizer.save(str(files / "tokenizer.json"))
    config = {
        "chat_template": tokenizer.chat_template.source,
        "bos_token": tokenizer.bos_token,
        "eos_token": {"content": tokenizer.eos_token},
    }
    (files / "tokenizer_config.json").write_text(json.dumps(config))
    backend = {
        "kind": "openai_compatible",
        "name": "vllm",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "smollm2",
        "tokenizer_dir": str(files),
    }
    path = write_config(
        tmp_path / "lantern.yaml", tmp_path, [{"name": "smollm2", "backends": [backend]}]
    )
    settings = load_settings(path)
    models, _ = build_model_table(settings, Http1Pool())
    counting = route_counting(settings, models.routes(), TiktokenCounting())
    assert counting.tokenizers.num_missing == 0  # nothing to fetch
    request = requests()[1]
    exact = engine_prompt_tokens(tokenizer, openai_wire.encode_request(request))
    assert counting.count_prompt(request, "acme") == exact


def _tool(name: str, description: str | None, properties: dict) -> dict:
    function = {"name": name, "parameters": {"type": "object", "properties": properties}}
    return {
        "type": "function",
        "function": function | ({"description": description} if description else {}),
    }


TOOLS = [
    _tool("get_weather", "Weather for a city, in °C.", {"city": {"type": "string"}}),
    _tool("get_time", None, {"tz": {"type": "string", "enum": ["UTC", "JST"]}}),
    _tool("search", "Search the web.", {"q": {"type": "string"}, "n": {"type": "integer"}}),
]
CHOICES: list = [
    None,
    "auto",
    "required",
    "none",
    {"type": "function", "function": {"name": "get_time"}},
]


@pytest.mark.parametrize("num_tools", [0, 1, 3])
@pytest.mark.parametrize("choice", range(len(CHOICES)))
def test_calls_with_tools_are_counted_as_the_engine_bills_them(
    counter: ChatPromptCounter,
    smollm_tokenizer: TextTokenizer,
    num_tools: int,
    choice: int,
) -> None:
    """0, 1 and several tools under every tool_choice, with a tool-call history and a JSON
    response format: the gateway's count is the engine's `prompt_tokens`."""
    body: dict = {"messages": OPENAI_BODIES[2]["messages"] + [{"role": "user", "content": "Go."}]}
    if num_tools:
        body["tools"] = TOOLS[:num_tools]
        if CHOICES[choice] is not None and (choice != 4 or num_tools == 3):
            body["tool_choice"] = CHOICES[choice]
    else:
        body["response_format"] = {"type": "json_object"}
    request = openai_wire.decode_request({"model": "smollm2", **body})
    sent = openai_wire.encode_request(request)
    exact = engine_prompt_tokens(smollm_tokenizer, sent)
    assert counter.count(engine_prompt(request)) == exact
    assert bound(engine_prompt(request)) >= exact
