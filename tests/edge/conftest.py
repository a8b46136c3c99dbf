"""An `egbe up` whose edge the tests reach over real sockets: scoped and unscoped world tokens, a small
frame limit so that a frame over it is cheap to send, a short wait for a first-frame token, and one
web origin allowed to POST."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx
import pytest

from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded

WORLD = "edge-world"
FRAME_LIMIT = 64 * 1024
FIRST_FRAME_TIMEOUT = 1.0
GAME_ORIGIN = "https://game.example"


@dataclass
class EdgeEgbe:
    """The running services, the edge's base URLs and the tokens by name."""

    egbe: EmbeddedEgbe
    tokens: dict[str, str]

    @property
    def http(self) -> str:
        return f"http://{self.egbe.http['edge']}"

    @property
    def ws(self) -> str:
        return f"ws://{self.egbe.http['edge']}"

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def kernel_channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.egbe.targets["kernel"])


@pytest.fixture(scope="session")
def edge_egbe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeEgbe]:
    data_dir = tmp_path_factory.mktemp("egbe-edge")
    tokens = {name: secrets.token_urlsafe(24) for name in ("world", "scoped", "service", "operator")}
    # Where embedded mode reads (and would otherwise generate) its tokens.
    tokens_file = data_dir / "tokens.json"
    tokens_file.write_text(
        json.dumps(
            {
                "world": [tokens["world"], {"token": tokens["scoped"], "worlds": ["elsewhere-*"]}],
                "service": tokens["service"],
                "operator": tokens["operator"],
            }
        )
    )
    tokens_file.chmod(0o600)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EGBE_EDGE__MAX_FRAME_BYTES", str(FRAME_LIMIT))
        env.setenv("EGBE_EDGE__FIRST_FRAME_TIMEOUT_SECONDS", str(FIRST_FRAME_TIMEOUT))
        env.setenv("EGBE_EDGE__CORS_ORIGINS", json.dumps([GAME_ORIGIN]))
        egbe = start_embedded(data_dir)
    yield EdgeEgbe(egbe, tokens)
    assert stop_embedded(egbe) == 0


_last_tick = 0


def next_ticks(count: int) -> range:
    """Ticks no test has sent yet: the kernel refuses a tick that goes backwards, across streams."""
    global _last_tick  # noqa: PLW0603 - one kernel serves the whole session
    first = _last_tick + 1
    _last_tick += count
    return range(first, first + count)


def registration_json(count: int) -> dict[str, object]:
    """A RegisterAgentsRequest in the canonical JSON mapping: `count` Ori with identities."""
    return {
        "worldId": WORLD,
        "agents": [
            {
                "ori": {"tenantId": "edge", "worldId": WORLD, "oriId": f"ori-{i}"},
                "traits": {"warmthBp": 5200, "curiosityBp": 4100},
                "identity": {"displayName": f"Ori {i}", "vocation": "smith", "locale": "en-US"},
            }
            for i in range(count)
        ],
    }


def batch_json(tick: int, agents: int, **extra: object) -> dict[str, object]:
    """A StreamTicksRequest in JSON: one row per agent, the 64-bit tick as a string."""
    frames = [{"slot": slot, "onScreen": True, "playerProximityMm": 1500} for slot in range(agents)]
    return {"batch": {"worldId": WORLD, "tick": str(tick), "frames": frames, **extra}}


AGENTS = 4


@pytest.fixture(scope="session")
def registered(edge_egbe: EdgeEgbe) -> EdgeEgbe:
    """The kernel serves WORLD with AGENTS Ori, registered through the edge."""
    answer = httpx.post(
        f"{edge_egbe.http}/v1/KernelService/RegisterAgents",
        json=registration_json(AGENTS),
        headers=edge_egbe.bearer("world"),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"slots": list(range(AGENTS)), "registeredTotal": AGENTS}
    return edge_egbe
