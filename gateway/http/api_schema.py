"""The request and reply bodies `/openapi.json` declares for routes that parse their own JSON.

Documentation only: the chat doors and the tool runs read raw bytes on their fast path and
validate with their own decoders; nothing here runs per request. The models follow the
providers' wire formats as far as the gateway reads them; unknown fields are allowed where
the gateway forwards them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- OpenAI chat completions -------------------------------------------------------------------


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class OpenAITextPart(BaseModel):
    type: Literal["text"]
    text: str


class OpenAIImageUrl(BaseModel):
    url: str


class OpenAIImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: OpenAIImageUrl


class OpenAIFunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class OpenAIToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCall


class OpenAISystemMessage(BaseModel):
    role: Literal["system", "developer"]
    content: str | list[OpenAITextPart]
    name: str | None = None


class OpenAIUserMessage(BaseModel):
    role: Literal["user"]
    content: str | list[OpenAITextPart | OpenAIImagePart]
    name: str | None = None


class OpenAIAssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | list[OpenAITextPart] | None = None
    tool_calls: list[OpenAIToolCall] | None = None


class OpenAIToolMessage(BaseModel):
    role: Literal["tool"]
    tool_call_id: str
    content: str | list[OpenAITextPart]


OpenAIMessage = Annotated[
    OpenAISystemMessage | OpenAIUserMessage | OpenAIAssistantMessage | OpenAIToolMessage,
    Field(discriminator="role"),
]


class OpenAIFunction(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON Schema


class OpenAITool(BaseModel):
    type: Literal["function"]
    function: OpenAIFunction


class OpenAINamedFunction(BaseModel):
    name: str


class OpenAINamedToolChoice(BaseModel):
    type: Literal["function"]
    function: OpenAINamedFunction


class OpenAIStreamOptions(BaseModel):
    include_usage: bool | None = None


class ChatCompletionRequest(_Open):
    """`POST /v1/chat/completions`; other OpenAI fields are forwarded as sent."""

    model: str
    messages: list[OpenAIMessage] = Field(min_length=1)
    tools: list[OpenAITool] | None = None
    tool_choice: Literal["auto", "none", "required"] | OpenAINamedToolChoice | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: OpenAIStreamOptions | None = None
    user: str | None = None
    prompt_cache_key: str | None = None


class OpenAIUsage(_Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class OpenAIReplyMessage(_Open):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[OpenAIToolCall] | None = None


class OpenAIChoice(_Open):
    index: int
    message: OpenAIReplyMessage
    finish_reason: str | None


class ChatCompletion(_Open):
    """The reply without `stream`; with it, `text/event-stream` chunks."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[OpenAIChoice]
    usage: OpenAIUsage | None = None


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    """Every error of the OpenAI-format routes: `code` names the rule, `param` the field."""

    error: OpenAIErrorDetail


# --- Anthropic messages ------------------------------------------------------------------------


class AnthropicTextBlock(BaseModel):
    type: Literal["text"]
    text: str


class AnthropicImageSource(BaseModel):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class AnthropicImageBlock(BaseModel):
    type: Literal["image"]
    source: AnthropicImageSource


class AnthropicToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class AnthropicToolResultBlock(BaseModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[AnthropicTextBlock] = ""
    is_error: bool = False


AnthropicBlock = Annotated[
    AnthropicTextBlock | AnthropicImageBlock | AnthropicToolUseBlock | AnthropicToolResultBlock,
    Field(discriminator="type"),
]


class AnthropicMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[AnthropicBlock]


class AnthropicTool(_Open):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]  # a JSON Schema


class AnthropicToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class AnthropicMetadata(BaseModel):
    user_id: str | None = None


class MessagesRequest(_Open):
    """`POST /v1/messages`; other Anthropic fields are forwarded as sent."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[AnthropicTextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    metadata: AnthropicMetadata | None = None


class AnthropicUsage(_Open):
    input_tokens: int
    output_tokens: int


class MessagesReply(_Open):
    """The reply without `stream`; with it, `text/event-stream` events."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: AnthropicUsage


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str  # names the field and the rule


class AnthropicError(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail


# --- tool runs, operations ----------------------------------------------------------------------


class ToolRunOutcome(_Open):
    """A tool run's outcome (`status` succeeded, failed, limit_exceeded, ...) or its state."""

    id: str
    object: Literal["tool.run"]
    tool: str
    status: str


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["starting", "ready", "draining", "degraded"]
    problems: list[str] | None = None  # degraded: e.g. `ledger_file_deleted` (docs/ledger.md)


class ModelEntry(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelEntry]


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` declaring `model` as the route's required JSON request body."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def errors(model: type[BaseModel], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries: each status answered with the error `model`."""
    return {status: {"model": model} for status in statuses}


REQUEST_MODELS: tuple[type[BaseModel], ...] = (ChatCompletionRequest, MessagesRequest)


def component_schemas(extra: tuple[type[BaseModel], ...] = ()) -> dict[str, Any]:
    """Schemas of the request models (and their parts), for `components.schemas`."""
    found: dict[str, Any] = {}
    for model in (*REQUEST_MODELS, *extra):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        found.update(schema.pop("$defs", {}))
        found[model.__name__] = schema
    return found
