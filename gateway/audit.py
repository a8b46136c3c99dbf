"""The cognition-call audit log's rules: what every record must carry to be attributable and replayable."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.records import LEASE_SETTLED, AuditEntry


@dataclass(frozen=True)
class AuditProblem:
    call_id: str
    missing: str


def audit_problems(entries: list[AuditEntry]) -> list[AuditProblem]:
    """Every record missing identity, replay context or a safety decision; empty means the log is valid."""
    problems: list[AuditProblem] = []
    for entry in entries:
        if entry.error_class == LEASE_SETTLED:  # no model call: a lease charged after a crash
            problems += _settlement_problems(entry)
            continue
        identity = {"call_id": entry.call_id, "run_id": entry.run_id, "ori_id": entry.ori_id}
        problems += [AuditProblem(entry.call_id, name) for name, value in identity.items() if not value]
        if entry.tier == 0:
            problems.append(AuditProblem(entry.call_id, "tier"))
        if not entry.model_ref:
            problems.append(AuditProblem(entry.call_id, "model_ref"))
        if not entry.input_context:
            problems.append(AuditProblem(entry.call_id, "input_context"))
        if not entry.output and not entry.error_class:  # a failed call has no output but says why
            problems.append(AuditProblem(entry.call_id, "output"))
        if not entry.policy_decision:
            problems.append(AuditProblem(entry.call_id, "policy_decision"))
        if not entry.retention_policy_id:
            problems.append(AuditProblem(entry.call_id, "retention_policy_id"))
        if not entry.config_fingerprint:
            problems.append(AuditProblem(entry.call_id, "config_fingerprint"))
    return problems


def _settlement_problems(entry: AuditEntry) -> list[AuditProblem]:
    """A lease settlement names its holder (`run_id`), world, what it charged and why, under the policy."""
    carried = {
        "run_id": entry.run_id,
        "world_id": entry.world_id,
        "input_context": entry.input_context,
        "policy_decision": entry.policy_decision,
        "retention_policy_id": entry.retention_policy_id,
        "config_fingerprint": entry.config_fingerprint,
    }
    return [AuditProblem(entry.call_id, name) for name, value in carried.items() if not value]
