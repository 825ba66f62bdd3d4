"""The bundled engine as a child process of `lantern serve` (backend kind `selfhost` + model_path).

Starts `python -m selfhost`, waits for its real-generation /health, stops it with the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import httpx

log = logging.getLogger("lantern.engine_child")


class EngineStartFailed(Exception):
    pass


class EngineChild:
    def __init__(
        self,
        name: str,
        model_path: str,
        host: str,
        port: int,
        device: str,
        dtype: str | None,
        start_timeout_s: float = 600.0,
    ) -> None:
        self.name = name
        self.argv = [
            sys.executable,
            "-m",
            "selfhost",
            "--model",
            model_path,
            "--host",
            host,
            "--port",
            str(port),
            "--device",
            device,
        ]
        if dtype:
            self.argv += ["--dtype", dtype]
        self.base_url = f"http://{host}:{port}/v1"
        self.health_url = f"http://{host}:{port}/health"
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        log.info("starting bundled engine %s: %s", self.name, " ".join(self.argv))
        self.process = subprocess.Popen(self.argv)
        deadline = time.monotonic() + self.start_timeout_s
        async with httpx.AsyncClient(timeout=30.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise EngineStartFailed(
                        f"engine {self.name} exited with code {self.process.returncode}"
                    )
                try:
                    if (await client.get(self.health_url)).status_code == 200:
                        log.info("engine %s ready at %s", self.name, self.base_url)
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
        await self.stop()
        raise EngineStartFailed(f"engine {self.name} not healthy after {self.start_timeout_s:.0f}s")

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 10)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)
