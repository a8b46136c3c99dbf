"""A dedicated `egbe up` for the system suite's adversarial tests, so their calls touch no shared state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded
from tests.system.cluster import ONE_LEDGER_WINDOW

# Small enough that an oversized request is cheap to build: every service's server refuses more, and
# the clients send up to it.
FUZZ_MAX_MESSAGE_BYTES = 1024 * 1024
FUZZ_MESSAGE_LIMITS = {
    "EGBE_MAX_MESSAGE_BYTES": str(FUZZ_MAX_MESSAGE_BYTES),
    **{
        f"EGBE_SERVER_LIMITS__{name.upper()}__MAX_MESSAGE_BYTES": str(FUZZ_MAX_MESSAGE_BYTES)
        for name in ("kernel", "gateway", "cognition", "policy", "biography")
    },
}
# The gateway's ledger must not move by itself while the fuzz compares snapshots around refused
# requests: no run times out (its reservation released) and the spend window never rolls over
# (a window of about a century starting at the epoch) during the module.
QUIET_LEDGER = {
    "EGBE_GATEWAY__RUN_TIMEOUT_SECONDS": str(24 * 3600),
    **ONE_LEDGER_WINDOW,
}


@pytest.fixture(scope="module")
def adversarial_egbe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**FUZZ_MESSAGE_LIMITS, **QUIET_LEDGER}.items():
            env.setenv(name, value)
        egbe = start_embedded(tmp_path_factory.mktemp("egbe-adversarial"))
    yield egbe
    assert egbe.process.poll() is None, "egbe up died under adversarial input"
    assert stop_embedded(egbe) == 0
