"""OpenAI-compatible HTTP server over the AsyncEngine (FastAPI): chat, completions, models,
health (a real one-token generation) and Prometheus metrics. `main(argv)` is the CLI entry.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from selfhost.engine.async_engine import AsyncEngine, EngineFailed
from selfhost.engine.llm_engine import RequestOutput, RequestRejected
from selfhost.engine.sampler import TokenLogprobs
from selfhost.engine.sequence import SamplingParams
from selfhost.model.chat_template import TemplateError
from selfhost.serve.metrics import render_metrics
from selfhost.serve.protocol import (
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
    TokenizeRequest,
    chat_logprobs,
    completion_logprobs,
    flattened,
)
from selfhost.serve.public_prefix import marked_request, public_token_count
from selfhost.serve.responses import ResponseShape, chat_shape, completion_shape
from selfhost.structured.chat_plan import compile_guide, plan_chat
from selfhost.structured.grammar import GrammarCompiler, GrammarRejected, Guide
from selfhost.structured.tool_format import fallback_card

HEALTH_TIMEOUT_S = 60.0
DISCONNECT_POLL_S = 0.5
# idle connections outlive the clients' pools (httpx 5 s, the gateway's 4 s), so the server never
# closes one as a client sends on it
KEEP_ALIVE_S = 65


class GenerationService:
    """What the generation routes share: the engine, the tokenizer and the response shaping."""

    def __init__(self, engine: AsyncEngine, model_name: str, default_max_tokens: int) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.model_name = model_name
        self.default_max_tokens = default_max_tokens
        self.grammars = GrammarCompiler(
            self.tokenizer.tokenizer.to_str(), self.tokenizer.eos_token_ids
        )

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def chat_logprobs(self, items: list[TokenLogprobs]) -> dict[str, Any]:
        return chat_logprobs(items, self.token_text)

    async def chat(self, body: ChatRequest, request: Request) -> Any:
        plan = plan_chat(
            body.text_messages(),
            body.tool_objects(),
            body.tool_choice,
            body.response_format,
            self.tokenizer.renders_tools,
        )
        text = self.tokenizer.render_chat(plan.messages, plan.tools)
        prompt = await asyncio.to_thread(self.tokenizer.encode, text)
        public = await asyncio.to_thread(self.public_tokens, body, text, prompt)
        guide = await asyncio.to_thread(compile_guide, self.grammars, plan)
        shape = chat_shape(self.model_name, self.chat_logprobs, plan.parses_calls)
        return await self.serve(request, body, prompt, body.num_logprobs(), shape, guide, public)

    def public_tokens(self, body: ChatRequest, text: str, prompt: list[int]) -> int:
        """Leading tokens of `prompt` inside the head the gateway declared public (0 without a
        salt: every block is unsalted then anyway)."""
        head = body.lantern_public
        if head is None or not body.cache_salt or not (head.tools or head.system):
            return 0
        messages, tools = marked_request(body.messages, body.tool_objects(), head)
        choice = "none" if body.tool_choice == "none" else "auto"
        plan = plan_chat(flattened(messages), tools, choice, None, self.tokenizer.renders_tools)
        marked_text = self.tokenizer.render_chat(plan.messages, plan.tools)
        return public_token_count(prompt, text, marked_text, self.tokenizer.encode)

    async def complete(self, body: CompletionRequest, request: Request) -> Any:
        prompt = body.prompt_text_or_ids()
        if isinstance(prompt, str):
            prompt = await asyncio.to_thread(self.tokenizer.encode, prompt)
        shape = completion_shape(
            self.model_name, lambda items: completion_logprobs(items, self.token_text)
        )
        return await self.serve(request, body, prompt, body.num_logprobs(), shape)

    async def serve(
        self,
        request: Request,
        body: GenerationRequest,
        prompt: list[int],
        num_logprobs: int | None,
        shape: ResponseShape,
        guide: Guide | None = None,
        public_tokens: int = 0,
    ) -> Any:
        params = body.sampling_params(self.default_max_tokens, num_logprobs)
        request_id = f"{shape.id_prefix}-{uuid.uuid4().hex}"
        outputs = self.engine.generate(
            request_id, prompt, params, body.cache_salt, guide, public_tokens=public_tokens
        )
        first = await anext(outputs)  # errors (e.g. too long) become a 4xx before any byte is sent
        headers = {"x-session-id": body.session_id or request.headers.get("x-session-id", "")}
        if body.stream:
            events = shape.sse(request_id, _chain(first, outputs), body.include_usage)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        collected = await _collect_unless_disconnected(request, _chain(first, outputs))
        return JSONResponse(shape.full(request_id, collected), headers=headers)

    async def tokenizer_card(self) -> Any:
        """What a gateway needs to count a chat prompt exactly as `chat` does, fetched once per
        replica: the tokenizer (tokenizer.json text), the chat template and its special tokens
        (no template: `TextTokenizer.render_chat`'s plain `role: content` lines), and the texts
        of the fallback tool format when the template renders no tools (`tool_format`)."""
        t = self.tokenizer
        return {
            "model": self.model_name,
            "tokenizer": t.tokenizer.to_str(),
            "chat_template": None if t.chat_template is None else t.chat_template.source,
            "bos_token": t.bos_token,
            "eos_token": t.eos_token,
            "max_model_len": self.engine.engine.max_model_len,
            "tool_format": None if t.renders_tools else fallback_card(),
        }

    async def tokenize(self, body: TokenizeRequest) -> Any:
        """vLLM's `/tokenize`: the prompt tokens of `messages` (chat template applied, as
        `chat` renders them) or of a plain `prompt`."""
        if body.messages is not None:
            text = self.tokenizer.render_chat(body.text_messages())
        else:
            text = body.prompt or ""
        tokens = await asyncio.to_thread(self.tokenizer.encode, text)
        limit = self.engine.engine.max_model_len
        return {"count": len(tokens), "max_model_len": limit, "tokens": tokens}

    async def health(self) -> Any:
        params = SamplingParams(temperature=0.0, max_tokens=1)
        prompt = self.tokenizer.encode("ping")
        stream = self.engine.generate(f"health-{uuid.uuid4().hex}", prompt, params)
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                outputs = [out async for out in stream]
        except (TimeoutError, EngineFailed) as exc:
            return _error(503, "server_error", f"health generation failed: {exc!r}")
        return {"status": "ok", "generated_tokens": sum(len(o.new_token_ids) for o in outputs)}


def create_app(engine: AsyncEngine, model_name: str, default_max_tokens: int = 256) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        yield
        await asyncio.to_thread(engine.stop)

    app = FastAPI(title="lantern selfhost engine", lifespan=lifespan)
    service = GenerationService(engine, model_name, default_max_tokens)
    app.add_exception_handler(RequestRejected, _rejected)
    app.add_exception_handler(TemplateError, _rejected)
    app.add_exception_handler(GrammarRejected, _unsupported)
    app.add_exception_handler(EngineFailed, _failed)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_api_route("/v1/chat/completions", service.chat, methods=["POST"])
    app.add_api_route("/v1/completions", service.complete, methods=["POST"])
    app.add_api_route("/health", service.health, methods=["GET"])
    app.add_api_route("/v1/tokenizer", service.tokenizer_card, methods=["GET"])
    app.add_api_route("/tokenize", service.tokenize, methods=["POST"])

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "lantern",
            # as vLLM reports it: prompt + output tokens one request may hold
            "max_model_len": engine.engine.max_request_tokens,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(render_metrics(engine.stats(), model_name))

    return app


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    """A field out of its range or of the wrong type: 400 in OpenAI's shape, naming it (as
    OpenAI and vLLM answer), not FastAPI's 422."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    first = errors[0] if errors else {}
    path = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(path) or None
    return _error(400, "invalid_request_error", f"{param}: {first.get('msg', exc)}", param=param)


async def _rejected(_: Request, exc: Exception) -> JSONResponse:
    return _error(400, "invalid_request_error", str(exc))


async def _unsupported(_: Request, exc: Exception) -> JSONResponse:
    field = exc.field if isinstance(exc, GrammarRejected) else None
    return _error(400, "invalid_request_error", str(exc), param=field)


async def _failed(_: Request, exc: Exception) -> JSONResponse:
    return _error(500, "server_error", str(exc))


async def _chain(
    first: RequestOutput, rest: AsyncIterator[RequestOutput]
) -> AsyncIterator[RequestOutput]:
    yield first
    if not first.finished:
        async for output in rest:
            yield output


async def _collect_unless_disconnected(
    request: Request, outputs: AsyncIterator[RequestOutput]
) -> list[RequestOutput]:
    """Collect every output; if the client goes away first, cancel (which aborts the request)."""

    async def collect() -> list[RequestOutput]:
        return [output async for output in outputs]

    task = asyncio.create_task(collect())
    while not task.done():
        await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await outputs.aclose()  # type: ignore[attr-defined]
            return []
    return task.result()


def _error(status: int, kind: str, message: str, param: str | None = None) -> JSONResponse:
    error = {"message": message, "type": kind, "code": status, "param": param}
    return JSONResponse({"error": error}, status_code=status)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lantern engine serve", description="Bundled paged-attention engine"
    )
    parser.add_argument(
        "--model", default="default", help="GGUF file, HF safetensors dir, or 'default'"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    parser.add_argument("--num-blocks", type=int, default=1024)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    parser.add_argument("--served-model-name", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cpu-kernels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU: compiled kernels, built at first start (--no-cpu-kernels: torch path only)",
    )
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CUDA: decode batches replay captured graphs (--no-cuda-graphs: eager kernels)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    import uvicorn

    from selfhost.builder import build_engine, default_dtype, served_name
    from selfhost.config import EngineConfig

    args = parse_args(argv)
    config = EngineConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype or default_dtype(args.device),
        num_blocks=args.num_blocks,
        max_num_batched_tokens=args.max_num_batched_tokens,
        chunk_size=args.chunk_size,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        num_threads=args.threads,
        cpu_kernels=args.cpu_kernels,
        cuda_graphs=args.cuda_graphs,
        seed=args.seed,
        served_model_name=args.served_model_name,
    )
    started = time.monotonic()
    engine = build_engine(config)
    print(f"selfhost: {config} loaded in {time.monotonic() - started:.1f} s", flush=True)
    app = create_app(AsyncEngine(engine), served_name(config))
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S
    )
    return 0
