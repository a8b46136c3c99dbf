"""Minor protection: a fail-closed gate across death-path, relationship-edge, scenario and incarnation."""

from __future__ import annotations

from policy_service.config import PolicyConfig
from policy_service.model import CheckResult, ProtectionRequest, ProtectionSurface, ProtectionVerdict
from policy_service.text_scan import phrases_found


def _blocked_terms(surface: ProtectionSurface, config: PolicyConfig) -> tuple[str, tuple[str, ...]]:
    """What a minor-coded Ori may never have on each surface but death-path, which is blocked whole."""
    return {
        ProtectionSurface.RELATIONSHIP_EDGE: ("no romantic edge", config.romantic_terms),
        ProtectionSurface.SCENARIO: ("no exploitative scenario", config.exploitative_terms),
        ProtectionSurface.INCARNATION: ("no mature-rated incarnation", config.mature_terms),
    }[surface]


def check_minor_protection(request: ProtectionRequest, config: PolicyConfig) -> ProtectionVerdict:
    """Allowed only when nothing on the surface harms a minor-coded party."""
    surface = request.surface
    tag_text = " ; ".join(request.tags)
    minor_involved = request.ori_is_minor or (
        surface is ProtectionSurface.RELATIONSHIP_EDGE and request.counterpart_is_minor
    )
    if not minor_involved:
        check = CheckResult(f"minor-protection:{surface}", True, "no minor-coded party on this surface")
        return ProtectionVerdict(True, (check,))
    if surface is ProtectionSurface.DEATH_PATH:
        check = CheckResult(f"minor-protection:{surface}", False, "death is blocked for a minor-coded Ori")
        return ProtectionVerdict(False, (check,))
    rule, terms = _blocked_terms(surface, config)
    found = phrases_found(tag_text, terms)
    deaths = phrases_found(tag_text, config.death_terms) if request.ori_is_minor else []
    checks = [
        CheckResult(
            f"minor-protection:{surface}",
            not found,
            f"{rule}: blocked by {found}" if found else f"{rule}: none of the blocked tags present",
        )
    ]
    if deaths:
        checks.append(
            CheckResult("minor-protection:death", False, f"death is blocked for a minor-coded Ori: {deaths}")
        )
    return ProtectionVerdict(all(c.passed for c in checks), tuple(checks))
