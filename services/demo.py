"""`egbe demo`: starts the embedded services if none are running, checks them, then runs the world.

The reference world (issue #8) is not built yet; until it is, this says so plainly after the
health check instead of pretending to run a scenario.
"""

from __future__ import annotations

import asyncio

from services.runtime import published_targets, start_services, stop_services
from services.settings import SERVICE_NAMES, EgbeSettings

DEMO_WORLD_NOT_BUILT = (
    "The demo world is not built yet (issue #8: the reference world, `egbe demo`, replay, fork and "
    "the run report). Every service above is up and healthy; nothing was simulated."
)


async def _demo(settings: EgbeSettings) -> int:
    from services.cli import check_health

    statuses = await check_health(published_targets(settings), deadline_seconds=1.0)
    started = []
    if not all(status == "SERVING" for status in statuses.values()):
        print("no running Egbe services found; starting the embedded services")
        settings = settings.model_copy(
            update={"endpoints": {n: e.model_copy(update={"port": 0}) for n, e in settings.endpoints.items()}}
        )
        started = await start_services(SERVICE_NAMES, settings)
        statuses = await check_health({r.bundle.name: r.target for r in started}, deadline_seconds=3.0)
    try:
        for name, status in statuses.items():
            print(f"{name:<10} {status}")
        if not all(status == "SERVING" for status in statuses.values()):
            print("some services are not SERVING; see above")
            return 1
        print(DEMO_WORLD_NOT_BUILT)
        return 0
    finally:
        await stop_services(started, settings)


def run_demo(settings: EgbeSettings) -> int:
    return asyncio.run(_demo(settings))
