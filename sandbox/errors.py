"""Errors `sandbox/` raises on purpose; the gateway maps them to HTTP in one place.

Each class carries its HTTP status and a stable `code`; callers never read the message text.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base of everything `sandbox/` raises on purpose."""

    status_code = 500
    code = "sandbox_error"
    error_type = "server_error"
    param: str | None = None
    retry_after_s: int | None = None  # set: the reply carries Retry-After


class SandboxUnavailable(SandboxError):
    """No isolation can be set up here (no bwrap, no user namespaces). Never run unsandboxed."""

    status_code = 503
    code = "sandbox_unavailable"


class ToolStoreUnavailable(SandboxError):
    """The database holding idempotency keys is unreachable: nothing ran, retry later."""

    status_code = 503
    code = "tool_store_unavailable"

    def __init__(self) -> None:
        super().__init__("the tool-run store (database) is unreachable; nothing ran, retry later")


class ResultNotStored(SandboxError):
    """The run started (it may have run to its end) but the store could not take its result.
    The caller must retry the same key, never a new one: the retry learns what the store knows
    (outcome_unknown for a local run; a Fargate run is reattached)."""

    status_code = 503
    code = "tool_run_result_not_stored"
    retry_after_s = 1

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"the tool run started, but the tool-run store is unreachable and its result was "
            f"not stored (run {run_id}); retry with the same Idempotency-Key, not a new one"
        )


class ToolNotAllowed(SandboxError):
    """The tool is not declared in the tenant's policy."""

    status_code = 403
    code = "tool_not_allowed"
    error_type = "permission_error"
    param = "tool"


class InvalidToolRequest(SandboxError):
    """Arguments or limits do not fit the tool's declaration."""

    status_code = 400
    code = "invalid_tool_request"
    error_type = "invalid_request_error"

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(f"{param}: {reason}")
        self.param = param


class IdempotencyKeyInvalid(InvalidToolRequest):
    """Missing, empty, too long or non-printable Idempotency-Key."""

    code = "idempotency_key_invalid"

    def __init__(self, reason: str) -> None:
        super().__init__("Idempotency-Key", reason)


class IdempotencyKeyReused(SandboxError):
    """Same key, different request (IETF draft: 422)."""

    status_code = 422
    code = "idempotency_key_reused"
    error_type = "invalid_request_error"
    param = "Idempotency-Key"


class IdempotencyKeyInUse(SandboxError):
    """Same key while the first request still runs (IETF draft: 409); retry later."""

    status_code = 409
    code = "idempotency_key_in_use"
    error_type = "invalid_request_error"
    param = "Idempotency-Key"
    retry_after_s = 1


class TooManyRuns(SandboxError):
    """The tenant already has `tool_runs.max_concurrent` runs going; nothing was started."""

    status_code = 429
    code = "tool_runs_concurrency_exceeded"
    error_type = "rate_limit_error"
    param = "tool_runs.max_concurrent"
    retry_after_s = 1


class RunNotFound(SandboxError):
    status_code = 404
    code = "tool_run_not_found"
    error_type = "invalid_request_error"
    param = "id"


class RunnerFailed(SandboxError):
    """The runner could not start or follow the tool (infrastructure, not the tool's exit)."""

    status_code = 502
    code = "tool_runner_failed"


class FargateConflict(RunnerFailed):
    """ECS said ConflictException: a replayed RunTask drifted from the stored one (our bug)."""

    status_code = 500
    code = "fargate_client_token_conflict"


class LeaseLost(SandboxError):
    """A fenced write affected no row: another worker took the run over after this one's
    lease ran out. That worker answers for the key now; a retry gets what it stores."""

    status_code = 409
    code = "idempotency_lease_lost"
    error_type = "invalid_request_error"
    param = "Idempotency-Key"
    retry_after_s = 1


class EgressDenied(SandboxError):
    """The egress proxy refused a destination (used inside the proxy, never crosses HTTP)."""

    status_code = 403
    code = "egress_denied"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
