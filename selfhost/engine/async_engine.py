"""Runs the LLMEngine loop in its own thread and streams outputs to asyncio callers.

Thread-safe queues only: commands go in through a queue.Queue, outputs come back through
loop.call_soon_threadsafe into one asyncio.Queue per request. Cancelling a stream aborts it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from selfhost.engine.llm_engine import EngineStats, LLMEngine, RequestOutput
from selfhost.engine.sequence import SamplingParams
from selfhost.structured.grammar import Guide


class EngineFailed(RuntimeError):
    """The engine loop raised while this request was in flight."""


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    cache_salt: str
    sink: asyncio.Queue[RequestOutput | Exception]
    loop: asyncio.AbstractEventLoop
    guide: Guide | None = None
    public_tokens: int = 0


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Stop:
    pass


class AsyncEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._commands: queue.Queue[_Add | _Abort | _Stop] = queue.Queue()
        self._sinks: dict[str, _Add] = {}
        self._stats = engine.stats()
        self._thread = threading.Thread(target=self._run, name="selfhost-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._commands.put(_Stop())
        self._thread.join(timeout=30)

    def stats(self) -> EngineStats:
        return self._stats

    async def generate(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        cache_salt: str = "",
        guide: Guide | None = None,
        *,
        public_tokens: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        """`public_tokens`: leading prompt tokens whose full blocks are shared across salts."""
        sink: asyncio.Queue[RequestOutput | Exception] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._commands.put(
            _Add(request_id, prompt_token_ids, params, cache_salt, sink, loop, guide, public_tokens)
        )
        finished = False
        try:
            while not finished:
                item = await sink.get()
                if isinstance(item, Exception):
                    finished = True
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:  # the caller went away (client disconnect): free its blocks now
                self._commands.put(_Abort(request_id))

    def _run(self) -> None:
        while True:
            block = not self.engine.has_unfinished()
            if not self._apply_commands(block):
                return
            if not self.engine.has_unfinished():
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # noqa: BLE001 - outside the step's own isolation (an
                # engine bug): the engine's state is unknown, so every request in flight fails
                self._fail_all(exc)
                continue
            self._stats = self.engine.stats()  # before delivery, so a client sees its own step
            self._deliver(outputs)

    def _apply_commands(self, block: bool) -> bool:
        """Apply queued commands (waiting for one if `block`); False once asked to stop."""
        try:
            command = self._commands.get(block=block)
        except queue.Empty:
            return True
        while True:
            if isinstance(command, _Stop):
                return False
            self._apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, command: _Add | _Abort) -> None:
        if isinstance(command, _Abort):
            self.engine.abort(command.request_id)
            self._sinks.pop(command.request_id, None)
            self._stats = self.engine.stats()
            return
        try:
            self.engine.add_request(
                command.request_id,
                command.prompt_token_ids,
                command.params,
                command.cache_salt,
                command.guide,
                public_tokens=command.public_tokens,
            )
        except Exception as exc:  # noqa: BLE001 - the request's own error goes back to its caller
            command.loop.call_soon_threadsafe(command.sink.put_nowait, exc)
            return
        self._sinks[command.request_id] = command

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            target = self._sinks.get(output.request_id)
            if target is None:
                continue
            item: RequestOutput | Exception = output
            if output.error is not None:
                item = EngineFailed(f"engine step failed: {output.error}")
            target.loop.call_soon_threadsafe(target.sink.put_nowait, item)
            if output.finished:
                del self._sinks[output.request_id]

    def _fail_all(self, exc: Exception) -> None:
        for request_id, target in list(self._sinks.items()):
            self.engine.abort(request_id)
            failure = EngineFailed(f"engine step failed: {exc!r}")
            target.loop.call_soon_threadsafe(target.sink.put_nowait, failure)
        self._sinks.clear()
