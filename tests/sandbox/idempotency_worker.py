"""One 'gateway process' for the multi-process idempotency tests (run with python -m).

It builds its own ToolRunService on the shared database, counts every real execution in a
side-effect file (appended before the sandbox starts), and prints one JSON line per answer.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import sys
import time

from sandbox.errors import SandboxError
from sandbox.idempotency import IdempotencyStore, create_store_engine
from sandbox.local_runner import LocalRunner
from sandbox.service import ToolRunService
from sandbox.types import RunOutput, SandboxJob, ToolLimits, ToolRunRequest, ToolSpec


class CountingRunner:
    def __init__(self, inner: LocalRunner, counter: str) -> None:
        self._inner = inner
        self._counter = counter

    def backend(self) -> str:
        return self._inner.backend()

    async def run(self, job: SandboxJob) -> RunOutput:
        fd = os.open(self._counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{job.argv[-1]} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return await self._inner.run(job)


def tools(sleep_s: float, marker: str) -> tuple[ToolSpec, ...]:
    command = ("sh", "-c", f'sleep {sleep_s}; echo "ran $1"', marker, "{word}")
    return (ToolSpec("slow_echo", command, limits=ToolLimits(wall_s=60)),)


async def ask(service: ToolRunService, specs: tuple[ToolSpec, ...], key: str) -> dict[str, object]:
    # every key at once: the tenant's run cap is not what these workers test
    request = ToolRunRequest("acme", "key-id", key, "slow_echo", (("word", key),), None, 64)
    try:
        reply = await service.submit(specs, request)
    except SandboxError as exc:
        return {"key": key, "status": exc.status_code, "code": exc.code}
    return {
        "key": key,
        "status": reply.http_status,
        "replayed": reply.replayed,
        "sha": hashlib.sha256(reply.body).hexdigest(),
        "body": reply.body.decode(),
    }


async def main(args: argparse.Namespace) -> None:
    engine = create_store_engine(args.db)  # as the gateway builds it
    store = IdempotencyStore(engine, time.time, lease_s=args.lease)
    local = LocalRunner(logging.getLogger("worker"))
    runner = CountingRunner(local, args.counter)
    service = ToolRunService(store, runner, time.time, logging.getLogger("worker"))
    specs = tools(args.sleep, args.marker)
    while time.time() < args.start_at:
        await asyncio.sleep(0.01)
    keys = args.keys.split(",")
    answers = list(await asyncio.gather(*(ask(service, specs, k) for k in keys)))  # concurrent
    answers += await asyncio.gather(*(ask(service, specs, k) for k in reversed(keys)))
    for key in keys[: args.sequential]:  # sequential retries
        answers.append(await ask(service, specs, key))
    for answer in answers:
        print(json.dumps(answer), flush=True)
    engine.dispose()
    local.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name, kind in [
        ("--db", str),
        ("--counter", str),
        ("--keys", str),
        ("--marker", str),
        ("--lease", float),
        ("--sleep", float),
        ("--start-at", float),
        ("--sequential", int),
    ]:
        parser.add_argument(name, type=kind, required=True)
    asyncio.run(main(parser.parse_args(sys.argv[1:])))
