"""The Fargate runner: one tool run as one ECS task (RunTask, FARGATE, awsvpc, no public IP).

The exact RunTask request is stored before the call and re-sent byte-identical on recovery
(same clientToken), so a retry reattaches instead of launching twice. It polls on its own
(not the `tasks_stopped` waiter), reads output from CloudWatch Logs, and maps stop codes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sandbox.errors import (
    FargateConflict,
    InvalidToolRequest,
    LeaseLost,
    RunnerFailed,
    ToolStoreUnavailable,
)
from sandbox.fingerprint import canonical_json, client_token
from sandbox.idempotency import RunRecord
from sandbox.types import FargateTarget, RunOutput, RunStatus, SandboxJob, ToolLimits

MAX_OVERRIDES_CHARS = 8192
ALLOWED_ENV = frozenset({"LANTERN_IDEMPOTENCY_KEY", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"})
_INFRA_STOP_CODES = {
    "TaskFailedToStart",
    "SpotInterruption",
    "TerminationNotice",
    "InfrastructureHealth",
    "ServiceSchedulerInitiated",
}


class RunStore(Protocol):
    """The part of the idempotency store the runner writes through (fenced)."""

    def mark_started(self, run_id: str, fence: int, backend_ref: str | None) -> bool: ...

    def set_ref(self, run_id: str, fence: int, backend_ref: str) -> bool: ...


@dataclass(frozen=True)
class FargatePolling:
    first_delay_s: float = 2.0
    max_delay_s: float = 30.0
    start_budget_s: float = 180.0  # Fargate's own PENDING limit is 3 minutes
    missing_grace_s: float = 60.0  # DescribeTasks is eventually consistent
    token_ttl_s: float = 23 * 3600.0  # ECS keeps clientTokens 24 h; stay inside it
    throttle_retries: int = 5


class FargateRunner:
    def __init__(
        self,
        ecs: Any,
        logs: Any,
        clock: Callable[[], float],
        logger: logging.Logger,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        polling: FargatePolling = FargatePolling(),
    ) -> None:
        self._ecs = ecs  # boto3 ECS client: sync, always called in a thread
        self._logs = logs
        self._clock = clock
        self._log = logger
        self._sleep = sleep
        self._polling = polling

    def run_task_request(
        self, job: SandboxJob, target: FargateTarget, token: str
    ) -> dict[str, Any]:
        """The exact RunTask keyword arguments for this run (no secrets: env is allow-listed)."""
        env = dict(job.env)
        if job.egress and target.proxy_url:
            env.update(HTTP_PROXY=target.proxy_url, HTTPS_PROXY=target.proxy_url)
        if set(env) - ALLOWED_ENV:
            raise InvalidToolRequest("env", "only non-secret LANTERN_*/proxy variables may be set")
        container: dict[str, Any] = {
            "name": target.container_name,
            "command": list(job.argv),
            "environment": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "memory": job.limits.memory_mb,
        }
        overrides = {"taskRoleArn": target.task_role_arn, "containerOverrides": [container]}
        if len(canonical_json(overrides)) > MAX_OVERRIDES_CHARS:
            raise InvalidToolRequest("arguments", f"overrides exceed {MAX_OVERRIDES_CHARS} chars")
        return {
            "cluster": target.cluster,
            "taskDefinition": target.task_definition,
            "launchType": "FARGATE",
            "count": 1,
            "clientToken": token,
            "startedBy": job.run_id[:36],
            "networkConfiguration": {
                "awsvpcConfiguration": {
                    "subnets": list(target.subnets),
                    "securityGroups": list(target.security_groups),
                    "assignPublicIp": "DISABLED",
                }
            },
            "overrides": overrides,
            "tags": [
                {"key": "lantern:run-id", "value": job.run_id},
                {"key": "lantern:tool", "value": job.tool},
            ],
            "enableExecuteCommand": False,
        }

    def longest_run_s(self, limits: ToolLimits) -> float:
        """How long a run can be followed at most: its start budget and wall time, one poll
        interval past that deadline, then the grace for the task to stop after StopTask."""
        polling = self._polling
        return (
            polling.start_budget_s + limits.wall_s + polling.max_delay_s + polling.missing_grace_s
        )

    async def run_recorded(
        self, store: RunStore, record: RunRecord, job: SandboxJob, target: FargateTarget
    ) -> RunOutput:
        """Launch (or reattach to) the task for this record and follow it to the end."""
        if record.state == "started" and record.backend_ref:
            ref = json.loads(record.backend_ref)
            request, task_arn = ref["request"], ref.get("task_arn")
            task_arn = task_arn or await self._find_task(request)
            if task_arn is None:
                if self._clock() - record.created_at > self._polling.token_ttl_s:
                    return self._unknown("the task cannot be found and its clientToken expired")
                try:  # the same token: ECS answers with the task it already started, if any
                    task_arn = await self._launch(request)
                except FargateConflict:
                    return self._unknown("ECS holds this clientToken for a different request")
        else:
            token = client_token(record.tenant, record.idem_key)
            request = self.run_task_request(job, target, token)
            started = json.dumps({"request": request}, sort_keys=True)
            if not await asyncio.to_thread(store.mark_started, record.id, record.fence, started):
                raise LeaseLost(f"lost the lease on run {record.id} before RunTask")
            task_arn = await self._launch(request)
        ref_json = json.dumps({"request": request, "task_arn": task_arn}, sort_keys=True)
        try:
            await asyncio.to_thread(store.set_ref, record.id, record.fence, ref_json)
        except ToolStoreUnavailable:  # a recovery finds the task without it (ListTasks, RunTask)
            self._log.warning(
                "tool run %s: task %s not recorded, store unreachable", job.run_id, task_arn
            )
        return await self._follow(task_arn, request, job, target)

    async def _launch(self, request: dict[str, Any]) -> str:
        delay = self._polling.first_delay_s
        for attempt in range(self._polling.throttle_retries + 1):
            try:
                reply = await asyncio.to_thread(functools.partial(self._ecs.run_task, **request))
                break
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code == "ConflictException":
                    raise FargateConflict("RunTask replay drifted from the stored request") from exc
                if code != "ThrottlingException" or attempt == self._polling.throttle_retries:
                    raise RunnerFailed(f"RunTask failed: {code}") from exc
                await self._sleep(delay)
                delay = min(delay * 2, self._polling.max_delay_s)
        failures, tasks = reply.get("failures") or [], reply.get("tasks") or []
        if failures or len(tasks) != 1:
            reasons = ", ".join(f"{f.get('reason')}: {f.get('detail', '')}" for f in failures)
            raise RunnerFailed(f"RunTask started no task ({reasons or 'no tasks returned'})")
        return str(tasks[0]["taskArn"])

    async def _find_task(self, request: dict[str, Any]) -> str | None:
        """A live task this run already started. ECS allows `startedBy` only as the sole filter,
        which lists running tasks; a stopped one is found by re-sending RunTask with the same
        clientToken instead (ECS answers with the task it started)."""
        listing = functools.partial(
            self._ecs.list_tasks, cluster=request["cluster"], startedBy=request["startedBy"]
        )
        reply = await asyncio.to_thread(listing)
        arns = reply.get("taskArns") or []
        return str(arns[0]) if arns else None

    async def _follow(
        self, task_arn: str, request: dict[str, Any], job: SandboxJob, target: FargateTarget
    ) -> RunOutput:
        first = self._clock()
        deadline = first + self._polling.start_budget_s + job.limits.wall_s
        delay, stopped_by_us = self._polling.first_delay_s, False
        while True:
            tasks = await self._describe(request["cluster"], task_arn)
            if tasks and tasks[0].get("lastStatus") == "STOPPED":
                return await self._result(tasks[0], target, job, stopped_by_us)
            if tasks == [] and self._clock() - first > self._polling.missing_grace_s:
                return self._infra(first, "task MISSING from DescribeTasks")
            if self._clock() > deadline and not stopped_by_us:
                stop = functools.partial(
                    self._ecs.stop_task,
                    cluster=request["cluster"],
                    task=task_arn,
                    reason=f"lantern-timeout:{job.run_id}",
                )
                await asyncio.to_thread(stop)
                stopped_by_us = True
                deadline = self._clock() + self._polling.missing_grace_s
            elif self._clock() > deadline:
                return self._infra(first, "task did not stop after StopTask")
            await self._sleep(delay)
            delay = min(delay * 2, self._polling.max_delay_s)

    async def _describe(self, cluster: str, task_arn: str) -> list[dict[str, Any]] | None:
        """The task as DescribeTasks lists it; None when throttled (the account's rate is
        shared by every run: a throttled poll is a poll with no news, not a failed run)."""
        describe = functools.partial(self._ecs.describe_tasks, cluster=cluster, tasks=[task_arn])
        try:
            reply = await asyncio.to_thread(describe)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") != "ThrottlingException":
                raise
            return None
        return list(reply.get("tasks") or [])

    async def _result(
        self, task: dict[str, Any], target: FargateTarget, job: SandboxJob, stopped_by_us: bool
    ) -> RunOutput:
        container: dict[str, Any] = next(
            (c for c in task.get("containers", []) if c.get("name") == target.container_name), {}
        )
        exit_code = container.get("exitCode")
        stop_code, reason = task.get("stopCode", ""), task.get("stoppedReason", "")
        if container.get("reason"):
            reason = f"{reason}; {container['reason']}" if reason else container["reason"]
        started = _epoch(task.get("startedAt")) or self._clock()
        finished = _epoch(task.get("stoppedAt")) or self._clock()
        text, cut = await self._output(task["taskArn"], target, job.limits.output_kb * 1024)
        if stopped_by_us:
            status, exit_code = RunStatus.TIMED_OUT, None
            reason = f"wall time limit {job.limits.wall_s}s; {reason}"
        elif exit_code is None or stop_code in _INFRA_STOP_CODES:
            status = RunStatus.INFRA_FAILED
        else:
            status = RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        vcpu, memory_gb = task_size(task)
        return RunOutput(
            status, exit_code, text, "", cut, False, started, finished, reason, vcpu, memory_gb
        )

    async def _output(self, task_arn: str, target: FargateTarget, cap: int) -> tuple[str, bool]:
        """awslogs stream `<prefix>/<container>/<task-id>`; stdout and stderr arrive merged.
        Pages are read only until they pass `cap`: a tool's log is never all held in memory."""
        stream = f"{target.log_stream_prefix}/{target.container_name}/{task_arn.rsplit('/', 1)[-1]}"
        lines: list[str] = []
        num_bytes = 0
        kwargs: dict[str, Any] = {
            "logGroupName": target.log_group,
            "logStreamName": stream,
            "startFromHead": True,
        }
        try:
            while True:
                page = await asyncio.to_thread(
                    functools.partial(self._logs.get_log_events, **kwargs)
                )
                messages = [event["message"] for event in page.get("events", [])]
                lines += messages
                num_bytes += sum(len(message.encode()) + 1 for message in messages)
                token = page.get("nextForwardToken")
                if not messages or token == kwargs.get("nextToken") or num_bytes - 1 > cap:
                    break  # the end, or (joined) enough to fill the cap and know it was cut
                kwargs["nextToken"] = token
        except ClientError as exc:
            self._log.warning("no CloudWatch output for %s: %s", task_arn, exc)
        data = "\n".join(lines).encode()
        return data[:cap].decode("utf-8", errors="replace"), len(data) > cap

    def _infra(self, started: float, reason: str) -> RunOutput:
        return RunOutput(
            RunStatus.INFRA_FAILED, None, "", "", False, False, started, self._clock(), reason
        )

    def _unknown(self, reason: str) -> RunOutput:
        now = self._clock()
        return RunOutput(RunStatus.OUTCOME_UNKNOWN, None, "", "", False, False, now, now, reason)


def task_size(task: dict[str, Any]) -> tuple[float | None, float | None]:
    """(vCPUs, GB) of a described task: its task-level `cpu` (units of 1/1024 vCPU) and
    `memory` (MiB), as Fargate bills them; None where DescribeTasks gave none."""
    sizes: list[float | None] = []
    for name in ("cpu", "memory"):
        try:
            sizes.append(int(task[name]) / 1024)
        except (KeyError, TypeError, ValueError):
            sizes.append(None)
    return sizes[0], sizes[1]


def _epoch(value: Any) -> float | None:
    return value.timestamp() if hasattr(value, "timestamp") else None
