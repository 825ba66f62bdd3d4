"""OpenAI wire shapes for the engine's server: request models and response/chunk builders.

Pure data; no engine or HTTP here. Unknown request fields are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from selfhost.engine.sampler import TokenLogprobs
from selfhost.engine.sequence import SamplingParams
from selfhost.serve.public_prefix import PublicHead

Bias = Annotated[float, Field(ge=-100.0, le=100.0)]  # OpenAI's range


class StreamOptions(BaseModel):
    include_usage: bool = False


class GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[int, Bias] | None = None  # token id (a string in JSON) -> its bias
    n: Literal[1] = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    cache_salt: str = ""
    session_id: str | None = None

    def sampling_params(self, default_max_tokens: int, num_logprobs: int | None) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
            seed=self.seed,
            stop=tuple(stop),
            stop_token_ids=tuple(self.stop_token_ids),
            ignore_eos=self.ignore_eos,
            logprobs=num_logprobs,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias=tuple((self.logit_bias or {}).items()),
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class FunctionSpec(BaseModel):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatRequest(GenerationRequest):
    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    # the declared-public head, set by the gateway: prefix blocks inside it are shared across
    # cache salts (selfhost/serve/public_prefix.py)
    lantern_public: PublicHead | None = None

    def tool_objects(self) -> list[dict[str, Any]]:
        """The tools as OpenAI tool objects, unset fields left out (they reach the prompt)."""
        return [tool.model_dump(exclude_none=True) for tool in self.tools or []]

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def text_messages(self) -> list[dict[str, Any]]:
        """Messages with list-of-parts content flattened to text, for the chat template."""
        return flattened(self.messages)


def flattened(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with list-of-parts content flattened to text, for the chat template."""
    return [{**m, "content": _content_text(m.get("content"))} for m in messages]


class TokenizeRequest(BaseModel):
    """vLLM's `/tokenize` body: chat `messages` (template applied) or a plain `prompt`."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None

    def text_messages(self) -> list[dict[str, Any]]:
        return [{**m, "content": _content_text(m.get("content"))} for m in self.messages or []]


class CompletionRequest(GenerationRequest):
    prompt: str | list[int] | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=20)

    def num_logprobs(self) -> int | None:
        return self.logprobs

    def prompt_text_or_ids(self) -> str | list[int]:
        """One prompt: text, token ids, or a list of text pieces (joined)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        if prompt and isinstance(prompt[0], str):
            return "".join(str(piece) for piece in prompt)
        return [int(t) for t in prompt]


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def chat_logprobs(items: list[TokenLogprobs], token_text: Any) -> dict[str, Any]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {
        "content": [
            {
                **entry(item.token_id, item.logprob),
                "top_logprobs": [entry(t, lp) for t, lp in item.top],
            }
            for item in items
        ]
    }


def completion_logprobs(items: list[TokenLogprobs], token_text: Any) -> dict[str, Any]:
    return {
        "tokens": [token_text(item.token_id) for item in items],
        "token_logprobs": [item.logprob for item in items],
        "top_logprobs": [{token_text(t): lp for t, lp in item.top} for item in items],
    }
