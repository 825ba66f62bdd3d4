"""ToolRunService: one tool call, at most once, in a box, behind an idempotency key.

Orchestrates policy lookup, fingerprint, store claim, runner and replay. It owns the order
of durable writes (started before spawn, result before reply); it never runs a tool whose
earlier attempt may have started.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from sandbox.errors import (
    FargateConflict,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    InvalidToolRequest,
    LeaseLost,
    ResultNotStored,
    RunnerFailed,
    RunNotFound,
    SandboxUnavailable,
    ToolNotAllowed,
    ToolStoreUnavailable,
    TooManyRuns,
)
from sandbox.fargate import FargateRunner
from sandbox.fingerprint import client_token, fingerprint
from sandbox.idempotency import IdempotencyStore, RunRecord
from sandbox.inflight import InflightGate
from sandbox.limits import fill_command, resolve_limits
from sandbox.metering import RunMeter, finished_run
from sandbox.replies import HTTP_FOR_STATUS, pending_object, post_body, run_object
from sandbox.run_slots import LocalRunSlots, RunSlots
from sandbox.types import RunOutput, RunStatus, SandboxJob, ToolRunReply, ToolRunRequest, ToolSpec


class ProcessRunner(Protocol):
    def backend(self) -> str:
        """Which isolation will be used; raises SandboxUnavailable when there is none."""
        ...

    async def run(self, job: SandboxJob) -> RunOutput: ...


@dataclasses.dataclass(frozen=True)
class _Prepared:
    spec: ToolSpec
    job: SandboxJob
    fingerprint: str


class ToolRunService:
    def __init__(
        self,
        store: IdempotencyStore,
        local: ProcessRunner,
        clock: Callable[[], float],
        logger: logging.Logger,
        fargate: FargateRunner | None = None,
        gate: InflightGate | None = None,
        slots: RunSlots | None = None,
        meter: RunMeter | None = None,
    ) -> None:
        self._store = store
        self._local = local
        self._fargate = fargate
        self._clock = clock
        self._log = logger
        self._gate = gate
        self._slots = slots if slots is not None else LocalRunSlots()
        self._meter = meter
        self._background: set[asyncio.Future[ToolRunReply]] = set()

    async def submit(self, tools: tuple[ToolSpec, ...], request: ToolRunRequest) -> ToolRunReply:
        """Run (or replay) one tool call. A caller that goes away does not stop the run: it
        finishes and records its result, so the client's retry gets the replay."""
        prepared = self._prepare(tools, request)
        task = asyncio.ensure_future(self._gated(request, prepared))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return await asyncio.shield(task)

    async def _gated(self, request: ToolRunRequest, prepared: _Prepared) -> ToolRunReply:
        token = uuid.uuid4().hex
        scope = f"{request.tenant}:{request.idempotency_key}"
        if self._gate is not None and not await self._gate.acquire(
            scope, token, self._store.lease_s
        ):
            return await self._answer_busy(request, prepared)
        try:
            return await self._submit(request, prepared)
        finally:
            if self._gate is not None:
                await self._gate.release(scope, token)

    async def get(self, tenant: str, run_id: str) -> ToolRunReply:
        """The tenant's run by id. An id that is not 32 lowercase hex digits belongs to no run
        and is not looked up (PostgreSQL refuses a NUL in any text)."""
        is_run_id = len(run_id) == 32 and all(c in "0123456789abcdef" for c in run_id)
        record = await asyncio.to_thread(self._store.get, tenant, run_id) if is_run_id else None
        if record is None:
            raise RunNotFound(f"no tool run {run_id!r}")
        if _is_abandoned_local_start(record, self._clock()):  # as a retry of its POST would
            with contextlib.suppress(IdempotencyKeyInUse, LeaseLost):  # another caller won
                await self._recover(record)
            record = await asyncio.to_thread(self._store.get, tenant, run_id) or record
        body = (
            record.response
            if record.state == "done" and record.response
            else pending_object(record)
        )
        return ToolRunReply(record.id, 200, body.encode(), replayed=False)

    async def sweep(self) -> int:
        """Delete finished runs past retention and runs whose gateway died a retention ago
        (call periodically); returns how many."""
        return await asyncio.to_thread(self._store.sweep)

    def _prepare(self, tools: tuple[ToolSpec, ...], request: ToolRunRequest) -> _Prepared:
        spec = next((tool for tool in tools if tool.name == request.tool), None)
        if spec is None:
            raise ToolNotAllowed(f"tool {request.tool!r} is not in this tenant's policy")
        if spec.runner == "fargate" and (spec.fargate is None or self._fargate is None):
            raise SandboxUnavailable(  # the operator's configuration, not the caller's request
                "the fargate runner is not configured (set sandbox.fargate_region and the "
                "tool's fargate fields)"
            )
        limits = resolve_limits(spec.limits, request.limits)
        argv = fill_command(spec.command, dict(request.arguments))
        env = (("LANTERN_IDEMPOTENCY_KEY", client_token(request.tenant, request.idempotency_key)),)
        job = SandboxJob("", spec.name, argv, limits, spec.egress, env)
        if spec.fargate is not None and self._fargate is not None:  # size/secret checks, early
            self._fargate.run_task_request(_with_placeholder_run_id(job), spec.fargate, "0" * 52)
        target = dataclasses.asdict(spec.fargate) if spec.fargate else None
        effective = {
            "tool": spec.name,
            "runner": spec.runner,
            "argv": list(argv),
            "egress": list(spec.egress),
            "limits": dataclasses.asdict(limits),
            "fargate": target,
        }
        return _Prepared(spec, job, fingerprint(effective))

    async def _answer_busy(self, request: ToolRunRequest, prepared: _Prepared) -> ToolRunReply:
        record = await asyncio.to_thread(self._store.find, request.tenant, request.idempotency_key)
        if record is not None and record.fingerprint != prepared.fingerprint:
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        if record is not None and record.state == "done":
            return _replay(record)
        raise IdempotencyKeyInUse("a request with this Idempotency-Key is still running")

    async def _submit(self, request: ToolRunRequest, prepared: _Prepared) -> ToolRunReply:
        claim = await asyncio.to_thread(
            self._store.claim,
            request.tenant,
            request.idempotency_key,
            prepared.fingerprint,
            prepared.spec.name,
            prepared.spec.runner,
        )
        if claim.kind == "mismatch":
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        if claim.kind == "replay":
            return _replay(claim.record)
        if claim.kind == "in_use":
            raise IdempotencyKeyInUse("a request with this Idempotency-Key is still running")
        record = claim.record
        if claim.kind == "stale":
            record = await self._recover(claim.record)
            if record.state == "done":
                return _replay(record)
        job = dataclasses.replace(prepared.job, run_id=record.id)
        async with self._lease_kept(record):
            if record.state != "claimed":  # reattaching to a started Fargate task: none new
                output = await self._execute(record, prepared.spec, job)
            else:
                output = await self._execute_in_slot(request, record, prepared.spec, job)
        self._bill(request, record.id, prepared.spec, job, output)
        try:
            stored = await self._finish(record, output)
        except ToolStoreUnavailable as exc:  # it ran: never say "nothing ran" now
            raise ResultNotStored(record.id) from exc
        return _replay(stored, replayed=False)

    def _bill(
        self, request: ToolRunRequest, run_id: str, spec: ToolSpec, job: SandboxJob, out: RunOutput
    ) -> None:
        """The run's meter reading, once it ran, before its result is stored (a store that
        fails then must not make it free); a meter that fails loses the row, never the
        result. A replay never gets here."""
        if self._meter is None:
            return
        try:
            self._meter.record(finished_run(request, run_id, spec.runner, job.limits, out))
        except Exception:  # noqa: BLE001 - the run's result matters more than its bill
            self._log.exception("tool run %s: not metered", run_id)

    @contextlib.asynccontextmanager
    async def _lease_kept(self, record: RunRecord) -> AsyncIterator[None]:
        """Renews the lease from the claim until the run's output is in hand, so time spent
        waiting for a slot, a worker thread or the database never lets another worker take
        over a run this one is about to start."""
        heartbeat = asyncio.create_task(self._heartbeat(record))
        try:
            yield
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _execute_in_slot(
        self, request: ToolRunRequest, record: RunRecord, spec: ToolSpec, job: SandboxJob
    ) -> RunOutput:
        """One of the tenant's run slots for the run's whole life, given back however it ends;
        none free: the claim is forgotten (nothing ran) and the caller gets a 429."""
        token = uuid.uuid4().hex
        life_s = job.limits.wall_s  # a local box is killed at its wall time
        if spec.runner == "fargate" and self._fargate is not None:
            life_s = self._fargate.longest_run_s(job.limits)
        ttl_s = life_s + self._store.lease_s
        try:
            taken = await self._slots.acquire(
                request.tenant, token, request.max_concurrent_runs, ttl_s
            )
        except SandboxUnavailable:  # the slot store is down: nothing starts uncounted
            await asyncio.to_thread(self._store.release, record.id, record.fence)
            raise
        if not taken:
            await asyncio.to_thread(self._store.release, record.id, record.fence)
            raise TooManyRuns(
                f"this tenant already has {request.max_concurrent_runs} tool runs going "
                f"(tool_runs.max_concurrent); retry after {TooManyRuns.retry_after_s}s"
            )
        try:
            return await self._execute(record, spec, job)
        finally:
            await self._slots.release(request.tenant, token)

    async def _recover(self, stale: RunRecord) -> RunRecord:
        """A lease ran out. Unstarted: take it over and run. Started locally: the outcome is
        unknown and stays so. Started on Fargate: take over and reattach to the task."""
        won = await asyncio.to_thread(self._store.take_over, stale)
        if won is None:
            raise IdempotencyKeyInUse("another worker is recovering this run")
        if won.state == "started" and won.runner == "local":
            now = self._clock()
            output = RunOutput(
                RunStatus.OUTCOME_UNKNOWN,
                None,
                "",
                "",
                False,
                False,
                now,
                now,
                "started, but its gateway stopped before recording the result; not run again",
            )
            return await self._finish(won, output)
        return won

    async def _execute(self, record: RunRecord, spec: ToolSpec, job: SandboxJob) -> RunOutput:
        try:
            return await self._run(record, spec, job)
        except (SandboxUnavailable, RunnerFailed, InvalidToolRequest) as exc:
            # Raised only when nothing was started (no process, no ECS task): forget the claim.
            # A clientToken conflict means ECS knows a task by this token: keep the record.
            if not isinstance(exc, FargateConflict):
                await asyncio.to_thread(self._store.release, record.id, record.fence)
            raise

    async def _run(self, record: RunRecord, spec: ToolSpec, job: SandboxJob) -> RunOutput:
        if spec.runner == "fargate":
            assert self._fargate is not None and spec.fargate is not None
            return await self._fargate.run_recorded(self._store, record, job, spec.fargate)
        if record.state == "started":
            raise LeaseLost("a started local run is never re-run")
        await asyncio.to_thread(self._local.backend)
        if not await asyncio.to_thread(self._store.mark_started, record.id, record.fence, "local"):
            raise LeaseLost(f"lost the lease on run {record.id} before it started")
        return await self._local.run(job)

    async def _finish(self, record: RunRecord, output: RunOutput) -> RunRecord:
        body = run_object(record, output)
        status = HTTP_FOR_STATUS[output.status]
        await asyncio.to_thread(self._store.complete, record.id, record.fence, status, body)
        stored = await asyncio.to_thread(self._store.get, record.tenant, record.id)
        if stored is None or stored.state != "done":
            raise LeaseLost(f"run {record.id} finished but its result could not be stored")
        # What ran, never its arguments or output (they are the tenant's data).
        self._log.info(
            "tool run id=%s tenant=%s tool=%s runner=%s status=%s exit_code=%s duration_ms=%d",
            record.id,
            record.tenant,
            record.tool,
            record.runner,
            output.status.value,
            output.exit_code,
            int((output.finished_at - output.started_at) * 1000),
        )
        return stored

    async def _heartbeat(self, record: RunRecord) -> None:
        """Renews until cancelled or taken over; a database that does not answer is asked
        again next time (the run goes on; its result is stored if the database is back when
        it ends)."""
        while True:
            await asyncio.sleep(self._store.lease_s / 3)
            try:
                renewed = await asyncio.to_thread(self._store.renew, record.id, record.fence)
            except ToolStoreUnavailable:
                self._log.warning("tool run %s: lease not renewed, store unreachable", record.id)
                continue
            if not renewed:
                self._log.warning("tool run %s lost its lease (fence %d)", record.id, record.fence)
                return


def _is_abandoned_local_start(record: RunRecord, now: float) -> bool:
    """Started in a local box by an owner that stopped renewing its lease: never run again,
    its outcome is unknown."""
    is_expired = record.lease_expires_at <= now
    return record.state == "started" and record.runner == "local" and is_expired


def _with_placeholder_run_id(job: SandboxJob) -> SandboxJob:
    return dataclasses.replace(job, run_id="0" * 32)


def _replay(record: RunRecord, replayed: bool = True) -> ToolRunReply:
    assert record.http_status is not None and record.response is not None
    return ToolRunReply(
        record.id, record.http_status, post_body(record.http_status, record.response), replayed
    )
