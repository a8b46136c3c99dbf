"""Maps the population onto the kernel's RegisterAgents request (one place for that field mapping)."""

from __future__ import annotations

from egbe.v1 import common_pb2, kernel_pb2
from world.population import PERSONALITY_AXES, Population
from world.scenario import ValueDomain

_DOMAIN = {domain: kernel_pb2.ValueDomain.Value(f"VALUE_DOMAIN_{domain.name}") for domain in ValueDomain}


def registration_request(
    population: Population, world_id: str, tenant_id: str
) -> kernel_pb2.RegisterAgentsRequest:
    """Every Ori in row order; vocations are interned in order of first appearance (0 = none)."""
    vocation_refs: dict[str, int] = {}
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
            )
        )
    return kernel_pb2.RegisterAgentsRequest(world_id=world_id, agents=agents)
