"""The Responses door's bodies as `/openapi.json` declares them (documentation only: the route
parses its own bytes with adapters/wire/responses/request.py, which is the authority)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ResponsesInputText(BaseModel):
    type: Literal["input_text", "output_text"]
    text: str


class ResponsesMessageItem(BaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ResponsesInputText]


class ResponsesFunctionCallItem(BaseModel):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class ResponsesFunctionOutputItem(BaseModel):
    type: Literal["function_call_output"]
    call_id: str
    output: str


ResponsesItem = Annotated[
    ResponsesMessageItem | ResponsesFunctionCallItem | ResponsesFunctionOutputItem,
    Field(discriminator="type"),
]


class ResponsesFunctionTool(BaseModel):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON Schema
    strict: bool | None = None


class ResponsesNamedToolChoice(BaseModel):
    type: Literal["function"]
    name: str


class ResponsesCreateRequest(BaseModel):
    """`POST /v1/responses`; a field not listed here is a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str | list[ResponsesItem]
    instructions: str | None = None
    tools: list[ResponsesFunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | ResponsesNamedToolChoice | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    previous_response_id: str | None = None
    store: bool | None = None
    stream: bool | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_key: str | None = None
    user: str | None = None


class ResponseObject(BaseModel):
    """The reply of `POST /v1/responses` and `GET /v1/responses/{id}` (fields as OpenAI's)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    status: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None


class ResponseItemList(BaseModel):
    """The reply of `GET /v1/responses/{id}/input_items` (fields as OpenAI's); `first_id` and
    `last_id` are null on an empty page."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
