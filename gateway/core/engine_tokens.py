"""Prompt tokens as a self-hosted engine bills them: the engine's own tokenizer and chat template,
fetched once per replica (`GET /v1/tokenizer`, served by the bundled engine) or read from the
model's tokenizer files (`tokenizer_dir`, for vLLM and SGLang) and then applied locally, so
counting a call costs no network round trip.

Must not import `selfhost` (the engine is another process; this is its wire contract). Where a
replica's tokenizer is not known yet, `bound` gives an upper bound instead of a count.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from gateway.core.engine_prompt import EnginePrompt, FallbackToolFormat, rendered_chat

log = logging.getLogger("lantern.engine_tokens")

TOKENIZER_PATH = "/tokenizer"  # under the replica's OpenAI base URL (…/v1)
FETCH_TIMEOUT_S = 5.0
# The upper bound while a replica's tokenizer is unknown: a byte-level BPE never makes more
# tokens than the UTF-8 bytes it encodes, plus room for the template's own text (role headers,
# separators) per message and once for a default system prompt and the reply priming.
TEMPLATE_ALLOWANCE_PER_MESSAGE = 16
TEMPLATE_ALLOWANCE_FIXED = 256
TOOLS_ALLOWANCE = 1024  # the tool format's own text (the bundled engine's: about 330 bytes)
# rendered prompt pieces kept with their token counts (~4M tokens); a pure memo (a lost piece
# costs encoding it again), so a bound by characters, not per tenant
MEMO_MAX_CHARS = 16_000_000


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def bound(prompt: EnginePrompt) -> int:
    """An upper bound of the prompt tokens of `prompt` under any byte-level BPE whose chat
    template adds at most the allowances above (and the tool format its preamble)."""
    messages = prompt.messages
    size = sum(
        len(str(m.get("role", ""))) + len(str(m["content"]).encode()) for m in messages
    ) + sum(len(json.dumps(m["tool_calls"]).encode()) for m in messages if m.get("tool_calls"))
    if prompt.tools:
        size += len(json.dumps(prompt.tools).encode()) + TOOLS_ALLOWANCE
    return size + TEMPLATE_ALLOWANCE_PER_MESSAGE * len(messages) + TEMPLATE_ALLOWANCE_FIXED


class PieceCounts:
    """Token counts of a rendered prompt, memoised per piece between added tokens (bounded LRU
    by characters). A `tokenizers` tokenizer splits its input at added tokens before anything
    else, so the count is the pieces' counts plus one per added token; an agent re-sends its
    history, so a call encodes only its new pieces. Tokenizers whose added tokens strip or match
    whole words only are encoded whole (`_splitter` is None)."""

    def __init__(self, tokenizer: Tokenizer, max_chars: int = MEMO_MAX_CHARS) -> None:
        self._tokenizer = tokenizer
        added = tokenizer.get_added_tokens_decoder().values()
        plain = all(not (a.lstrip or a.rstrip or a.single_word or a.normalized) for a in added)
        contents = sorted({a.content for a in added}, key=len, reverse=True)
        self._splitter = (
            re.compile("|".join(re.escape(c) for c in contents)) if plain and contents else None
        )
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()  # the loop and the large-call lane's thread share it
        self._chars = 0
        self._max_chars = max_chars

    def count(self, text: str) -> int:
        if self._splitter is None:
            return self._encode(text)
        total, start = 0, 0
        for match in self._splitter.finditer(text):
            total += self._piece(text[start : match.start()]) + 1
            start = match.end()
        return total + self._piece(text[start:])

    def _encode(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _piece(self, piece: str) -> int:
        if not piece:
            return 0
        with self._lock:
            found = self._memo.get(piece)
            if found is not None:
                self._memo.move_to_end(piece)
                return found
        found = self._encode(piece)
        with self._lock:
            if piece not in self._memo:
                self._memo[piece] = found
                self._chars += len(piece)
            while self._chars > self._max_chars:
                evicted, _ = self._memo.popitem(last=False)
                self._chars -= len(evicted)
        return found


class ChatPromptCounter:
    """One engine's tokenizer and chat template (a sandboxed jinja2 environment, as the engine
    renders it); `count` is exact for the prompt the engine will build from the messages."""

    def __init__(self, card: Mapping[str, Any]) -> None:
        self._tokenizer = Tokenizer.from_str(str(card["tokenizer"]))
        self._pieces = PieceCounts(self._tokenizer)
        source = card.get("chat_template")
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(source) if isinstance(source, str) else None
        self._bos = str(card.get("bos_token") or "")
        self._eos = str(card.get("eos_token") or "")
        # a template that renders no tools: the engine writes them in its fallback format
        self._fallback = FallbackToolFormat.from_card(card.get("tool_format"))

    def render(self, prompt: EnginePrompt) -> str:
        messages, tools = rendered_chat(prompt, self._fallback)
        if self._template is None:
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        extra = {} if tools is None else {"tools": tools}
        return self._template.render(
            messages=messages,
            bos_token=self._bos,
            eos_token=self._eos,
            add_generation_prompt=True,
            **extra,
        )

    def count(self, prompt: EnginePrompt) -> int:
        """The engine's prompt tokens, its tools included; the upper bound when the template
        refuses the messages (the engine then answers 400 before any work, so no more can be
        billed)."""
        try:
            text = self.render(prompt)
        except TemplateError:
            return bound(prompt)
        return self._pieces.count(text)


def card_from_dir(path: Path) -> dict[str, Any]:
    """A tokenizer card from a Hugging Face model directory (`tokenizer.json`, and the chat
    template and special tokens of `tokenizer_config.json`): the files vLLM and SGLang serve
    the model with, for servers that do not serve their tokenizer."""
    config_path = path / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    template = config.get("chat_template")
    return {
        "tokenizer": (path / "tokenizer.json").read_text(),
        "chat_template": template if isinstance(template, str) else None,
        "bos_token": _token_text(config.get("bos_token")),
        "eos_token": _token_text(config.get("eos_token")),
    }


def _token_text(value: Any) -> str:
    return str(value.get("content", "")) if isinstance(value, Mapping) else str(value or "")


class EngineTokenizers:
    """The counters of self-hosted replicas by base URL, fetched once each (`fetch_missing`);
    replicas serving the same tokenizer and template share one counter."""

    def __init__(self, replicas: Sequence[str]) -> None:
        self._missing = set(replicas)
        self._counters: dict[str, ChatPromptCounter] = {}
        self._by_card: dict[bytes, ChatPromptCounter] = {}

    def preload(self, replica: str, counter: ChatPromptCounter) -> None:
        """A replica whose tokenizer the configuration gives (`tokenizer_dir`): never fetched."""
        self._counters[replica] = counter
        self._missing.discard(replica)

    def get(self, replica: str) -> ChatPromptCounter | None:
        return self._counters.get(replica)

    @property
    def num_missing(self) -> int:
        return len(self._missing)

    async def fetch_missing(self, client: httpx.AsyncClient) -> None:
        """Fetch each replica's tokenizer not known yet; one that cannot answer stays missing
        (asked again on the next call of this), one that answers 404 serves none."""
        for replica in sorted(self._missing):
            url = replica.rstrip("/") + TOKENIZER_PATH
            try:
                response = await client.get(url, timeout=FETCH_TIMEOUT_S)
                if response.status_code == 404:  # a server that does not serve its tokenizer
                    log.info("%s serves no tokenizer: its calls are counted with tiktoken", url)
                    self._missing.discard(replica)
                    continue
                response.raise_for_status()
                card = response.json()
                key = hashlib.sha256(response.content).digest()
                counter = self._by_card.get(key)
                if counter is None:  # building it parses a few MB of JSON: off the loop
                    counter = await asyncio.to_thread(ChatPromptCounter, card)
            except (httpx.HTTPError, ValueError, KeyError, TypeError, TemplateError) as exc:
                log.info("tokenizer of %s not fetched (%s)", replica, exc)
                continue
            self._by_card[key] = self._counters[replica] = counter
            self._missing.discard(replica)
