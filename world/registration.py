"""Maps the population onto the kernel's RegisterAgents request (one place for that field mapping).

Each registration carries the Ori's identity, so the kernel writes it into the biography as the
first event of the Ori's life before it answers.
"""

from __future__ import annotations

from egbe.v1 import biography_pb2, common_pb2, kernel_pb2
from world.population import NEED_AXES, PERSONALITY_AXES, OriRow, Population
from world.scenario import ValueDomain

_DOMAIN = {domain: kernel_pb2.ValueDomain.Value(f"VALUE_DOMAIN_{domain.name}") for domain in ValueDomain}


def ori_identity(row: OriRow, names: dict[str, str]) -> biography_pb2.OriIdentity:
    """Who one Ori is, as the scenario authored it (or drew it); `names` maps Ori ids to names."""
    return biography_pb2.OriIdentity(
        display_name=row.name,
        vocation=row.vocation,
        home=row.home_name,
        locale=row.locale,
        personality=[
            biography_pb2.TraitLevel(axis=axis.removesuffix("_bp"), level_bp=level)
            for axis, level in zip(PERSONALITY_AXES, row.personality, strict=True)
        ],
        values=[biography_pb2.ValueItem(value_ref=v.domain.value, weight_bp=v.weight_bp) for v in row.values],
        quirks=row.quirks,
        needs=biography_pb2.NeedsBaseline(**dict(zip(NEED_AXES, row.needs, strict=True))),
        relationships=[
            biography_pb2.IdentityRelationship(
                other_ori_id=r.with_ori,
                other_name=names[r.with_ori],
                kind=r.kind.value,
                affinity_bp=r.affinity_bp,
            )
            for r in row.relationships
        ],
        minor=row.minor,
        persona=row.persona,
    )


def registration_request(
    population: Population, world_id: str, tenant_id: str
) -> kernel_pb2.RegisterAgentsRequest:
    """Every Ori in row order; vocations are interned in order of first appearance (0 = none)."""
    vocation_refs: dict[str, int] = {}
    names = {row.id: row.name for row in population.rows if row.authored}
    agents = []
    for i, row in enumerate(population.rows):
        vocation_ref = vocation_refs.setdefault(row.vocation, len(vocation_refs) + 1) if row.vocation else 0
        traits = kernel_pb2.PersonalityTraits(
            **{axis: int(population.personality[i, j]) for j, axis in enumerate(PERSONALITY_AXES)}
        )
        agents.append(
            kernel_pb2.AgentRegistration(
                ori=common_pb2.OriRef(tenant_id=tenant_id, world_id=world_id, ori_id=row.id),
                traits=traits,
                values=[
                    kernel_pb2.RankedValue(domain=_DOMAIN[v.domain], weight_bp=v.weight_bp)
                    for v in row.values
                ],
                quirks=row.quirks,
                vocation_ref=vocation_ref,
                minor=row.minor,
                identity=ori_identity(row, names),
            )
        )
    return kernel_pb2.RegisterAgentsRequest(world_id=world_id, agents=agents)
