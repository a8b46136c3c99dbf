"""A dedicated `egbe up` for the system suite's adversarial tests, so their calls touch no shared state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded

# Small enough that an oversized request is cheap to build.
FUZZ_MAX_MESSAGE_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def adversarial_egbe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEgbe]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EGBE_MAX_MESSAGE_BYTES", str(FUZZ_MAX_MESSAGE_BYTES))
        egbe = start_embedded(tmp_path_factory.mktemp("egbe-adversarial"))
    yield egbe
    assert egbe.process.poll() is None, "egbe up died under adversarial input"
    assert stop_embedded(egbe) == 0
