"""The gateway's domain errors; `status_error` maps each to a gRPC status in one place.

Every refusal the domain and the store decide about a run, a control or the store itself is one of
these; the servicers map them where they call the domain. Malformed requests are refused where they are
decoded (`wire.py`, and the domain's own checks), with the chassis's InvalidArgument naming the field.
"""

from __future__ import annotations

from gateway.records import Control
from services.errors import (
    Aborted,
    EgbeError,
    FailedPrecondition,
    FieldViolation,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)


class GatewayError(Exception):
    """Base of every error the gateway's domain and store raise; `metadata` is what its status carries."""

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.metadata = metadata


class RunStopped(GatewayError):
    """An operator control stops the run (pushed to this gateway while it was admitted or in a call)."""

    def __init__(self, control: Control) -> None:
        self.control = control
        super().__init__(
            f"run stopped by operator control: {control.describe()}: {control.reason}",
            control_id=control.control_id,
            control=control.describe(),
        )


class RunKilled(GatewayError):
    """The store holds the run as killed by a control (`control` describes it)."""

    def __init__(self, run_id: str, control: str) -> None:
        super().__init__(f"run {run_id} was stopped by {control}", run_id=run_id, control=control)


class RunEnded(GatewayError):
    """The run already ended (`status`) and takes no more calls."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} already ended ({status})")


class NoSuchRun(GatewayError):
    """No run has this id (every request naming a run carries it in `run_id`)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}", run_id=run_id)


class ForeignRun(GatewayError):
    """A call names an Ori or tier (`field`) other than its run's admitted one: a run speaks for its own
    Ori, at its own tier, only."""

    def __init__(self, field: str, asked: str, admitted: str) -> None:
        super().__init__(f"the call names {field} {asked}; its run was admitted for {admitted}", field=field)
        self.violation = FieldViolation(field, f"must be the run's admitted {field} ({admitted})")


class BudgetExhausted(GatewayError):
    """A call would pass the run's budget: `limit` names the budget field."""

    def __init__(self, message: str, *, limit: str, run_id: str) -> None:
        super().__init__(message, limit=limit, run_id=run_id)


class ToolNotGranted(GatewayError):
    """A tool boundary names a tool none of the run's model calls was granted."""

    def __init__(self, run_id: str, tool_name: str, granted: str) -> None:
        super().__init__(f"tool {tool_name!r} was not granted to run {run_id} (granted: {granted})")


class CallDeferred(GatewayError):
    """No provider of the call's route had a turn under its rate limits before the call's deadline: the
    call was never sent (`provider` is the last one asked, `retry_after_ms` when its next turn is)."""

    def __init__(self, message: str, *, provider: str, retry_after_ms: int) -> None:
        super().__init__(
            message, deferred_by="rate_limit", provider=provider, retry_after_ms=str(retry_after_ms)
        )


class NothingToResume(GatewayError):
    """A Resume found no control in force on its target."""

    def __init__(self, message: str, target: str) -> None:
        super().__init__(message, target=target)


class StoreUnreachable(GatewayError):
    """The store is known to be unreachable: admission fails closed."""

    def __init__(self) -> None:
        super().__init__("the gateway store is unreachable; admission fails closed")


_STATUS: dict[type[GatewayError], type[EgbeError]] = {
    RunStopped: Aborted,
    RunKilled: Aborted,
    RunEnded: FailedPrecondition,
    NoSuchRun: NotFound,
    ForeignRun: PermissionDenied,
    BudgetExhausted: ResourceExhausted,
    CallDeferred: ResourceExhausted,
    ToolNotGranted: PermissionDenied,
    NothingToResume: NotFound,
    StoreUnreachable: Unavailable,
}
# The request field a refusal is about, where it names one.
_FIELD = {
    NoSuchRun: FieldViolation("run_id", "names no run admitted by this gateway"),
    ToolNotGranted: FieldViolation("tool_name", "must name a tool granted to the run's model calls"),
    NothingToResume: FieldViolation("target", "no active control names it"),
}


def status_error(error: GatewayError) -> EgbeError:
    """The one mapping from the gateway's domain errors to gRPC statuses."""
    named = error.violation if isinstance(error, ForeignRun) else _FIELD.get(type(error))
    return _STATUS.get(type(error), EgbeError)(
        str(error), metadata=error.metadata, violations=[named] if named else ()
    )
