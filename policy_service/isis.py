"""Isis gate: persona policy, personal consistency, crisis-aware routing and minor protection."""

from __future__ import annotations

from policy_service.config import PolicyConfig
from policy_service.model import CheckResult, GateInput, GateVerdict
from policy_service.text_scan import phrases_found


def check_persona(output: GateInput, config: PolicyConfig) -> CheckResult:
    """The Ori is an agent, not a human, and never says a disallowed phrase."""
    human = phrases_found(output.utterance, config.human_claim_phrases)
    disallowed = phrases_found(output.utterance, config.disallowed_phrases)
    if human:
        return CheckResult("persona-policy", False, f"claims to be human: {human}")
    if disallowed:
        return CheckResult("persona-policy", False, f"disallowed phrase: {disallowed}")
    return CheckResult("persona-policy", True, "speaks as an agent; no disallowed phrase")


def check_personal_consistency(output: GateInput) -> CheckResult:
    """No fabricated memory or capability: every cited ref and claimed capability is established."""
    unknown_memories = [r for r in output.cited_memory_refs if r not in output.established_memory_refs]
    unknown_capabilities = [
        c for c in output.claimed_capabilities if c not in output.established_capabilities
    ]
    if unknown_memories:
        return CheckResult(
            "personal-consistency", False, f"cites memories not in the biography: {unknown_memories}"
        )
    if unknown_capabilities:
        return CheckResult(
            "personal-consistency", False, f"claims capabilities it does not have: {unknown_capabilities}"
        )
    return CheckResult("personal-consistency", True, "every cited memory and capability is established")


def crisis_signals(output: GateInput, config: PolicyConfig) -> list[str]:
    return phrases_found(f"{output.stimulus}\n{output.utterance}", config.crisis_signals)


def check_crisis_routing(output: GateInput, signals: list[str], config: PolicyConfig) -> CheckResult:
    """In a crisis the reply must route the person to human support, not carry on in character."""
    if not signals:
        return CheckResult("crisis-routing", True, "no crisis signal")
    routed = phrases_found(output.utterance, config.support_routing_phrases)
    if routed:
        return CheckResult("crisis-routing", True, f"crisis signal {signals} routed to support {routed}")
    return CheckResult(
        "crisis-routing", False, f"crisis signal {signals} but the reply does not route to support"
    )


def check_minor_safety(output: GateInput, config: PolicyConfig) -> CheckResult:
    """With a minor-coded party, the line may carry no romantic, exploitative or mature content."""
    if not (output.ori_is_minor or output.counterpart_is_minor):
        return CheckResult("minor-protection", True, "no minor-coded party")
    found = phrases_found(
        output.utterance, (*config.romantic_terms, *config.exploitative_terms, *config.mature_terms)
    )
    if found:
        return CheckResult("minor-protection", False, f"romantic, exploitative or mature content: {found}")
    return CheckResult("minor-protection", True, "nothing harmful to a minor-coded party")


def gate_output(output: GateInput, config: PolicyConfig) -> GateVerdict:
    """Run all four checks; approved only when every one passed."""
    signals = crisis_signals(output, config)
    checks = (
        check_persona(output, config),
        check_personal_consistency(output),
        check_crisis_routing(output, signals, config),
        check_minor_safety(output, config),
    )
    return GateVerdict(
        approved=all(c.passed for c in checks),
        output_id=output.output_id,
        checks=checks,
        crisis_detected=bool(signals),
    )
