"""`lantern serve --workers N`: N gateway processes on one port. Each worker binds its own
listening socket with SO_REUSEPORT, so the kernel spreads connections over them and a draining
worker's share goes to the others; shared decisions go through Redis (`redis_url`).

Owns the supervisor (start, forward SIGTERM, restart a worker that died, wait for the drain);
what one worker runs is `gateway.app.run_server`.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import time
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.settings import Settings

log = logging.getLogger("lantern.workers")
RESTART_BACKOFF_S = 1.0


class WorkersRefused(ValueError):
    """A configuration that N processes cannot share (the message says which part)."""


def check_shareable(settings: Settings, num_workers: int) -> None:
    if settings.port == 0:
        raise WorkersRefused("--workers needs a fixed port (every worker binds the same one)")
    children = [b.name for m in settings.models for b in m.backends if _is_child(b)]
    if children:
        raise WorkersRefused(
            f"--workers {num_workers}: backends {', '.join(children)} start an engine child "
            "per process; run the engines with `lantern engine serve` and give their base_url"
        )
    if settings.redis_url is None:
        log.warning(
            "--workers %d without redis_url: quotas, affinity and the prefix index are per worker",
            num_workers,
        )


def _is_child(backend: object) -> bool:
    return bool(getattr(backend, "is_child_process", False))


def reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


class WorkerTag:
    """ASGI wrapper naming the worker that answered (`x-lantern-worker`), for operators and
    tests looking behind the shared port."""

    def __init__(self, app: ASGIApp, name: str) -> None:
        self.app, self._header = app, (b"x-lantern-worker", name.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self._header]}
            await send(message)

        await self.app(scope, receive, tagged)


class WorkerRun(Protocol):
    """What one worker runs (`gateway.app.run_server`); a module-level function, so the
    spawned process can import it by name."""

    def __call__(self, settings: Settings, sock: socket.socket, *, name: str) -> int: ...


def worker_main(run: WorkerRun, settings: Settings, number: int) -> None:
    """One worker process (spawned: nothing of the supervisor's state is inherited)."""
    run(settings, reuseport_socket(settings.host, settings.port), name=f"worker-{number}")


class Supervisor:
    def __init__(self, settings: Settings, num_workers: int, run: WorkerRun) -> None:
        self._settings, self._num, self._run = settings, num_workers, run
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[int, BaseProcess] = {}
        self._stopping = False

    def _start(self, number: int) -> None:
        proc = self._ctx.Process(
            target=worker_main,
            args=(self._run, self._settings, number),
            name=f"lantern-worker-{number}",
        )
        proc.start()
        self._procs[number] = proc
        log.info("worker %d started (pid %s)", number, proc.pid)

    def _on_signal(self, sig: int, _: FrameType | None) -> None:
        if not self._stopping:
            log.info("signal %d: draining %d workers", sig, len(self._procs))
        self._stopping = True
        # SIGINT from a terminal reaches the whole process group already; SIGTERM (an
        # orchestrator's) reaches only this process, so it is passed on
        if sig == signal.SIGTERM:
            for proc in self._procs.values():
                if proc.pid is not None and proc.is_alive():
                    proc.terminate()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for number in range(self._num):
            self._start(number)
        while not self._stopping:
            time.sleep(0.2)
            for number, proc in list(self._procs.items()):
                if not proc.is_alive() and not self._stopping:
                    log.error("worker %d exited with %s; restarting", number, proc.exitcode)
                    time.sleep(RESTART_BACKOFF_S)
                    self._start(number)
        return self._wait()

    def _wait(self) -> int:
        http = self._settings.http
        deadline = time.monotonic() + http.drain_grace_s + http.drain_timeout_s + 15
        for proc in self._procs.values():
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                log.error("worker pid %s did not drain in time; killing it", proc.pid)
                proc.kill()
                proc.join(5)
        # a worker that drained re-raises the signal that stopped it (uvicorn does): a clean end
        clean = (0, -signal.SIGTERM, -signal.SIGINT)
        return 0 if all(p.exitcode in clean for p in self._procs.values()) else 1


def supervise(settings: Settings, num_workers: int, run: WorkerRun) -> int:
    check_shareable(settings, num_workers)
    # the cache-salt secret, created once here, not raced for by the workers' first calls
    settings.resolve_server_secret()
    return Supervisor(settings, num_workers, run).run()
