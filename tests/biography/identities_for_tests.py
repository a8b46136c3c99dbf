"""Identities for the biography tests: OriIdentity messages and registrations built the way the wire does."""

from __future__ import annotations

from biography_service.config import BiographyConfig
from biography_service.identity import Registration
from biography_service.identity_wire import register_identities_request
from egbe.v1 import biography_pb2


def identity(name: str = "Kunle", vocation: str = "smith", **overrides: object) -> biography_pb2.OriIdentity:
    fields: dict[str, object] = {
        "display_name": name,
        "vocation": vocation,
        "home": "the forge by the river",
        "locale": "yo-NG",
        "personality": [
            biography_pb2.TraitLevel(axis="warmth", level_bp=6000),
            biography_pb2.TraitLevel(axis="caution", level_bp=3000),
        ],
        "values": [
            biography_pb2.ValueItem(value_ref="craft", weight_bp=9000),
            biography_pb2.ValueItem(value_ref="kinship", weight_bp=6000),
        ],
        "quirks": ["hums while working", "counts nails twice"],
        "needs": biography_pb2.NeedsBaseline(safety_bp=2000, social_bp=4000),
        "relationships": [
            biography_pb2.IdentityRelationship(
                other_ori_id="ori-tobi", other_name="Tobi", kind="friend", affinity_bp=-2500
            )
        ],
        "persona": "I keep the village's tools sharp.\nI speak plainly.",
    }
    fields.update(overrides)
    return biography_pb2.OriIdentity(**fields)  # type: ignore[arg-type]


def registration_message(
    ori_id: str, who: biography_pb2.OriIdentity | None = None, tick: int = 5
) -> biography_pb2.IdentityRegistration:
    return biography_pb2.IdentityRegistration(ori_id=ori_id, identity=who or identity(), world_tick=tick)


def registrations(*messages: biography_pb2.IdentityRegistration) -> list[Registration]:
    """Validated as RegisterIdentities validates them."""
    request = biography_pb2.RegisterIdentitiesRequest(registrations=list(messages))
    return register_identities_request(request, BiographyConfig())
