"""solo-ceiling in reduced time: the ceiling population saturates the 96 M-token cap; Atropos defers."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembly.world_runs import run_demo
from tests.integration.test_world_demo import isolated_settings

pytestmark = pytest.mark.slow


async def test_the_launch_ceiling_saturates_the_world_cap(tmp_path: Path) -> None:
    run_dir, artifact = await run_demo(
        isolated_settings(tmp_path / "data"),
        "solo-ceiling",
        7,
        tmp_path / "runs",
        reduced_time=True,
        progress=False,
        check_replay=False,
    )
    assert artifact.reduced_time
    assert artifact.ticks_run == 600
    assert artifact.population == {
        "total": 1_424,
        "unspecified": 0,
        "clotho": 24,
        "lachesis": 400,
        "atropos": 1_000,
    }
    assert (artifact.tiers.clotho[-1], artifact.tiers.lachesis[-1], artifact.tiers.atropos[-1]) == (
        24,
        400,
        1_000,
    )
    saturation = artifact.saturation
    assert saturation is not None
    assert saturation.world_cap_tokens == 96_000_000
    assert saturation.total_allowed_tokens == 96_000_000
    assert saturation.total_deferred_tokens == 15_000_000
    assert saturation.world_cap_held
    by_tier = {t.tier: t for t in saturation.tiers}
    assert by_tier["clotho"].allowed_tokens == 72_000_000  # 24 x 60 active-minutes x 50,000
    assert by_tier["lachesis"].allowed_tokens == 24_000_000  # 400 x 6 reflections x 10,000
    assert by_tier["atropos"].allowed_tokens == 0
    assert by_tier["atropos"].deferred_tokens == 15_000_000  # 1,000 x 15,000: the work no player sees
    assert artifact.bill.relevance_ratio < 0.01
    assert (run_dir / "report.html").read_text().count('<svg class="chart"') >= 5
