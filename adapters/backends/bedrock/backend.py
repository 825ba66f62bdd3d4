"""The Bedrock backend: boto3's `bedrock-runtime` Converse and ConverseStream behind `Backend`.

boto3 is synchronous: every call runs in a thread, and stream events cross to the event loop
through a queue, so the loop never blocks. A call's `extra_headers` (its `traceparent`) reach
the request through botocore's `before-call` hook, read from the calling thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from adapters.backend import BackendCall
from adapters.backends.bedrock.converse_reply import ConverseStreamDecoder, decode_converse
from adapters.backends.bedrock.converse_request import encode_converse
from adapters.backends.bedrock.errors import map_error
from adapters.backends.spec import DEFAULT_BETAS, forwarded_betas
from adapters.errors import ProviderTimeout, ProviderUnavailable
from adapters.types import ChatResponse, StreamEvent, WireFormat


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
        self.betas = frozenset(DEFAULT_BETAS)  # the allow-list of client betas
        self._client_obj: Any = None
        self._lock = threading.Lock()
        self._headers = threading.local()  # the headers of the call this thread is making

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
                client = boto3.session.Session().client(
                    "bedrock-runtime",
                    region_name=self.region or None,
                    endpoint_url=self.endpoint_url,
                    config=config,
                )
                client.meta.events.register("before-call.bedrock-runtime", self._add_headers)
                self._client_obj = client
            return self._client_obj

    def _add_headers(self, params: dict[str, Any], **_: Any) -> None:
        """botocore's `before-call`: the calling thread's headers on the request it builds."""
        headers = getattr(self._headers, "extra", None)
        if headers:
            params["headers"].update(headers)

    def _call(
        self, operation: str, kwargs: dict[str, Any], headers: Mapping[str, str] | None
    ) -> Any:
        """`operation` of the client, in this thread, with `headers` on its request."""
        self._headers.extra = headers
        try:
            return getattr(self._client(), operation)(**kwargs)
        finally:
            self._headers.extra = None

    def _kwargs(self, call: BackendCall) -> dict[str, Any]:
        betas = forwarded_betas(call.betas, self.betas)
        return encode_converse(self.name, self.model_id, call.request, self.cache_points, betas)

    async def complete(self, call: BackendCall) -> ChatResponse:
        kwargs = self._kwargs(call)

        def run() -> Mapping[str, Any]:
            reply: Mapping[str, Any] = self._call("converse", kwargs, call.extra_headers)
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
            args=(kwargs, call.extra_headers, _put(loop, queue), stop),
            name=f"bedrock-stream-{self.name}",
            daemon=True,
        )
        thread.start()
        decoder = ConverseStreamDecoder(self.model_id)
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
        self,
        kwargs: dict[str, Any],
        headers: Mapping[str, str] | None,
        put: Callable[[tuple[str, Any]], None],
        stop: threading.Event,
    ) -> None:
        try:
            reply = self._call("converse_stream", kwargs, headers)
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
