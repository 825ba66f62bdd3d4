"""Backend for Amazon Bedrock through boto3's `bedrock-runtime` Converse and ConverseStream.

Encodes the canonical request as Converse (with `cachePoint` blocks), maps usage, stop reasons
and AWS errors back to canonical types. boto3 is synchronous: every call runs in a thread, and
stream events cross to the event loop through a queue, so the loop never blocks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from adapters.backend import BackendCall
from adapters.backends.spec import BackendSpec
from adapters.errors import (
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    UpstreamError,
)
from adapters.types import (
    JSON,
    CacheControl,
    ChatRequest,
    ChatResponse,
    ContentPart,
    ImagePart,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
    Usage,
    WireFormat,
)

MAX_CACHE_POINTS = 4
_STOP: Mapping[str, StopReason] = {
    "end_turn": "stop",
    "tool_use": "tool_use",
    "max_tokens": "length",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "stop",
    "content_filtered": "stop",
    "model_context_window_exceeded": "length",
}
_RATE = {"ThrottlingException"}
_TIMEOUT = {"ModelTimeoutException"}
_UNAVAILABLE = {
    "ServiceUnavailableException",
    "InternalServerException",
    "ModelNotReadyException",
    "ModelErrorException",
    "ModelStreamErrorException",
}


def usage_from_converse(u: Mapping[str, Any]) -> Usage:
    """Converse's `inputTokens` excludes cache reads and writes, as canonical `Usage` does."""
    return Usage(
        input_tokens=int(u.get("inputTokens", 0)),
        output_tokens=int(u.get("outputTokens", 0)),
        cache_read_tokens=int(u.get("cacheReadInputTokens", 0)),
        cache_write_tokens=int(u.get("cacheWriteInputTokens", 0)),
    )


def stop_reason_from_converse(reason: str | None) -> StopReason:
    return _STOP.get(reason or "", "error")


# --- request encoding -------------------------------------------------------------------------


def _cache_point(cc: CacheControl) -> dict[str, Any]:
    point: dict[str, Any] = {"type": "default"}
    if cc.ttl == "1h":
        point["ttl"] = "1h"
    return {"cachePoint": point}


def _image(backend: str, part: ImagePart) -> dict[str, Any]:
    if part.data_b64 is None or part.media_type is None:
        raise ProviderRejected(backend, "Bedrock Converse takes images as bytes, not URLs")
    fmt = part.media_type.split("/")[-1].replace("jpg", "jpeg")
    return {"image": {"format": fmt, "source": {"bytes": base64.b64decode(part.data_b64)}}}


def _block(backend: str, part: ContentPart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return _image(backend, part)
    if isinstance(part, ToolUsePart):
        args = json.loads(part.arguments_json) if part.arguments_json.strip() else {}
        return {"toolUse": {"toolUseId": part.id, "name": part.name, "input": args}}
    content = [_block(backend, c) for c in part.content]
    return {
        "toolResult": {
            "toolUseId": part.tool_use_id,
            "content": [c for c in content if c is not None] or [{"text": ""}],
            "status": "error" if part.is_error else "success",
        }
    }


class _Points:
    """Places cache points: the client's own markers, else tools, system and the last turn."""

    def __init__(self, enabled: bool, request: ChatRequest) -> None:
        self.enabled = enabled
        self.left = MAX_CACHE_POINTS
        parts = [*request.system, *request.tools, *(p for m in request.messages for p in m.content)]
        self.auto = enabled and not any(p.cache_control is not None for p in parts)

    def after(self, out: list[dict[str, Any]], cc: CacheControl | None) -> None:
        if self.enabled and cc is not None and self.left > 0 and out:
            out.append(_cache_point(cc))
            self.left -= 1


def _messages(backend: str, request: ChatRequest, points: _Points) -> list[dict[str, Any]]:
    """Converse wants alternating user/assistant turns; tool results ride in user turns."""
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            block = _block(backend, part)
            if block is not None:
                blocks.append(block)
                points.after(blocks, part.cache_control)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if points.auto and out:
        points.after(out[-1]["content"], CacheControl())
    return out


def _tool_choice(choice: JSON) -> dict[str, Any] | None:
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind in ("auto", None):
        return {"auto": {}}
    if kind in ("any", "required"):
        return {"any": {}}
    if kind == "tool" and isinstance(choice, dict):
        return {"tool": {"name": choice["name"]}}
    if kind == "function" and isinstance(choice, dict):
        return {"tool": {"name": choice["function"]["name"]}}
    return None  # "none": Converse has no such choice; the tools stay declared


def encode_converse(
    backend: str, model_id: str, request: ChatRequest, cache_points: bool
) -> dict[str, Any]:
    """The keyword arguments of `client.converse` / `client.converse_stream`."""
    points = _Points(cache_points, request)
    kwargs: dict[str, Any] = {"modelId": model_id}
    if request.tools:
        tools: list[dict[str, Any]] = []
        for t in request.tools:
            spec = {"name": t.name, "inputSchema": {"json": dict(t.input_schema)}}
            if t.description:
                spec["description"] = t.description
            tools.append({"toolSpec": spec})
            points.after(tools, t.cache_control)
        if points.auto:
            points.after(tools, CacheControl())
        config: dict[str, Any] = {"tools": tools}
        choice = _tool_choice(request.tool_choice)
        if choice is not None and request.tool_choice is not None:
            config["toolChoice"] = choice
        kwargs["toolConfig"] = config
    system: list[dict[str, Any]] = []
    for part in request.system:
        if part.text:
            system.append({"text": part.text})
            points.after(system, part.cache_control)
    if points.auto:
        points.after(system, CacheControl())
    if system:
        kwargs["system"] = system
    kwargs["messages"] = _messages(backend, request, points)
    inference: dict[str, Any] = {}
    for key, value in (
        ("maxTokens", request.max_tokens),
        ("temperature", request.temperature),
        ("topP", request.top_p),
    ):
        if value is not None:
            inference[key] = value
    if request.stop:
        inference["stopSequences"] = list(request.stop)
    if inference:
        kwargs["inferenceConfig"] = inference
    return kwargs


def decode_converse(model_id: str, reply: Mapping[str, Any]) -> ChatResponse:
    content: list[TextPart | ToolUsePart] = []
    for block in reply.get("output", {}).get("message", {}).get("content", []):
        if "text" in block:
            content.append(TextPart(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            args = json.dumps(use.get("input", {}), separators=(",", ":"), ensure_ascii=False)
            content.append(ToolUsePart(use["toolUseId"], use["name"], args))
    request_id = reply.get("ResponseMetadata", {}).get("RequestId", "")
    return ChatResponse(
        id=f"bedrock-{request_id}",
        model=model_id,
        content=tuple(content),
        stop_reason=stop_reason_from_converse(reply.get("stopReason")),
        usage=usage_from_converse(reply.get("usage", {})),
    )


# --- errors ---------------------------------------------------------------------------------


def map_error(backend: str, exc: BaseException) -> UpstreamError:
    """AWS error codes (structured, never message text) → the adapters' error hierarchy."""
    from botocore import exceptions as bx

    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        code = code[:1].upper() + code[1:]  # stream exceptions arrive as throttlingException
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        detail = f"{code}: {error.get('Message', '')}"
        if code in _RATE:
            return ProviderRateLimited(backend, detail, status or 429)
        if code in _TIMEOUT:
            return ProviderTimeout(backend, detail, status)
        if code in _UNAVAILABLE or (status or 0) >= 500:
            return ProviderUnavailable(backend, detail, status)
        return ProviderRejected(backend, detail, status)
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectTimeoutError | TimeoutError):
        return ProviderTimeout(backend, type(exc).__name__)
    if isinstance(exc, bx.BotoCoreError):  # connection errors, missing credentials, ...
        return ProviderUnavailable(backend, type(exc).__name__)
    return ProviderUnavailable(backend, f"{type(exc).__name__}: {exc}")


# --- the backend ----------------------------------------------------------------------------


class _StreamDecoder:
    """ConverseStream events → canonical stream events (StreamEnd after `metadata`)."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.stop: StopReason = "error"
        self.ended = False

    def feed(self, request_id: str, event: Mapping[str, Any]) -> list[StreamEvent]:
        if "messageStart" in event:
            return [StreamStart(f"bedrock-{request_id}", self.model_id)]
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = start.get("start", {}).get("toolUse")
            if use:
                return [ToolCallStart(start["contentBlockIndex"], use["toolUseId"], use["name"])]
        elif "contentBlockDelta" in event:
            d = event["contentBlockDelta"]
            index, delta = d["contentBlockIndex"], d.get("delta", {})
            if "text" in delta:
                return [TextDelta(index, delta["text"])]
            if "toolUse" in delta:
                return [ToolCallDelta(index, delta["toolUse"].get("input", ""))]
        elif "messageStop" in event:
            self.stop = stop_reason_from_converse(event["messageStop"].get("stopReason"))
        elif "metadata" in event:
            self.ended = True
            return [StreamEnd(self.stop, usage_from_converse(event["metadata"].get("usage", {})))]
        return []


class BedrockBackend:
    kind = "bedrock"
    wire: WireFormat | None = None

    def __init__(
        self,
        name: str,
        model_id: str,
        region: str,
        endpoint_url: str | None = None,
        timeout_s: float = 120,
        cache_points: bool = True,
    ) -> None:
        self.name = name
        self.model_id = model_id
        self.region = region
        self.endpoint_url = endpoint_url
        self.timeout_s = timeout_s
        self.cache_points = cache_points
        self._client_obj: Any = None
        self._lock = threading.Lock()

    def _client(self) -> Any:
        """Built on first use, in a worker thread (reading the credential chain is I/O)."""
        with self._lock:
            if self._client_obj is None:
                import boto3
                from botocore.config import Config

                config = Config(
                    region_name=self.region or None,
                    connect_timeout=min(10.0, self.timeout_s),
                    read_timeout=self.timeout_s,
                    retries={"total_max_attempts": 1, "mode": "standard"},  # fallback is ours
                )
                self._client_obj = boto3.session.Session().client(
                    "bedrock-runtime",
                    region_name=self.region or None,
                    endpoint_url=self.endpoint_url,
                    config=config,
                )
            return self._client_obj

    def _kwargs(self, call: BackendCall) -> dict[str, Any]:
        return encode_converse(self.name, self.model_id, call.request, self.cache_points)

    async def complete(self, call: BackendCall) -> ChatResponse:
        kwargs = self._kwargs(call)

        def run() -> Mapping[str, Any]:
            reply: Mapping[str, Any] = self._client().converse(**kwargs)
            return reply

        try:
            reply = await asyncio.wait_for(
                asyncio.to_thread(run), min(call.timeout_s, self.timeout_s)
            )
        except Exception as exc:
            raise map_error(self.name, exc) from exc
        return decode_converse(self.model_id, reply)

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        kwargs = self._kwargs(call)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        thread = threading.Thread(
            target=self._pump,
            args=(kwargs, _put(loop, queue), stop),
            name=f"bedrock-stream-{self.name}",
            daemon=True,
        )
        thread.start()
        decoder = _StreamDecoder(self.model_id)
        request_id = ""
        timeout_s = min(call.timeout_s, self.timeout_s)
        try:
            while True:
                try:
                    kind, payload = await asyncio.wait_for(queue.get(), timeout_s)
                except TimeoutError as exc:
                    raise ProviderTimeout(self.name, f"no stream event in {timeout_s:g} s") from exc
                if kind == "request_id":
                    request_id = payload
                elif kind == "event":
                    for out in decoder.feed(request_id, payload):
                        yield out
                elif kind == "error":
                    raise map_error(self.name, payload) from payload
                else:
                    break
            if not decoder.ended:
                raise ProviderUnavailable(self.name, "stream ended before its metadata event")
        finally:
            stop.set()  # the pump closes the HTTP stream at its next event

    def _pump(
        self, kwargs: dict[str, Any], put: Callable[[tuple[str, Any]], None], stop: threading.Event
    ) -> None:
        try:
            reply = self._client().converse_stream(**kwargs)
            put(("request_id", reply.get("ResponseMetadata", {}).get("RequestId", "")))
            events = reply["stream"]
            try:
                for event in events:
                    if stop.is_set():
                        break
                    put(("event", event))
            finally:
                events.close()
        except Exception as exc:
            put(("error", exc))
            return
        put(("done", None))

    async def aclose(self) -> None:
        client, self._client_obj = self._client_obj, None
        if client is not None:
            await asyncio.to_thread(client.close)


def _put(
    loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Any]]
) -> Callable[[tuple[str, Any]], None]:
    def put(item: tuple[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
            loop.call_soon_threadsafe(queue.put_nowait, item)

    return put


def build_bedrock_backend(spec: BackendSpec) -> BedrockBackend:
    """The factory's entry: `model` is the Bedrock modelId, `extra.region`, `base_url` an
    optional endpoint override (tests, VPC endpoints), `extra.cache_points` (default true)."""
    if not spec.model:
        raise ValueError(f"backend {spec.name}: model (the Bedrock modelId) is required")
    region = str(spec.extra.get("region", ""))  # empty: the AWS chain (AWS_REGION, config)
    return BedrockBackend(
        spec.name,
        spec.model,
        region,
        spec.base_url,
        spec.timeout_s,
        bool(spec.extra.get("cache_points", True)),
    )
