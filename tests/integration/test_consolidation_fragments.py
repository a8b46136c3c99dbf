"""De-escalation end to end: the kernel's pending fragments reach a real biography and become events."""

from __future__ import annotations

import asyncio
from pathlib import Path

from assembly.settings import load_settings
from biography_service.server import build_bundle as build_biography
from egbe.v1 import action_pb2, biography_pb2, biography_pb2_grpc
from kernel_service.dispatcher import Dispatcher
from services.auth import Role
from services.channels import channel_opener
from tests.integration.inprocess_services import TOKENS, channel_to, metadata, serve_bundles, token_store
from tests.kernel_service.frames import make_kernel
from tests.kernel_service.test_fragments import CONFIG, run_stint


async def test_consolidation_carries_the_fragments_into_the_biography_without_loss(tmp_path: Path) -> None:
    settings = load_settings(data_dir=str(tmp_path))
    async with (
        serve_bundles([await build_biography(settings, token_store())], settings) as served,
        channel_to(served.target("biography")) as channel,
    ):
        dispatcher = Dispatcher(
            biography_target=served.target("biography"),
            token=TOKENS[Role.SERVICE],
            dial=channel_opener(settings),
        )
        await dispatcher.start()
        kernel = make_kernel(2, "c", CONFIG)
        try:
            tick = 1
            handed: list[action_pb2.LifecycleRequest] = []
            for _ in range(2):  # two stints: the second consolidation carries only its own fragments
                tick, found = run_stint(kernel, tick, 2)
                handed += found
                result = action_pb2.TickResult(lifecycle=found)
                dispatcher.offer(result)
            sent = sum(len(r.fragments) for r in handed)
            for _ in range(200):
                if dispatcher.stats.fragments_consolidated == sent:
                    break
                await asyncio.sleep(0.02)
            assert dispatcher.stats.failures == 0
            assert dispatcher.stats.fragments_consolidated == sent > 0
            assert dispatcher.stats.consolidations_with_loss == 0
        finally:
            await dispatcher.close()
        biography = biography_pb2_grpc.BiographyServiceStub(channel)
        for ori_id in ("ori-0", "ori-1"):
            read = await biography.Read(
                biography_pb2.ReadRequest(ori_id=ori_id, page_size=100), metadata=metadata()
            )
            # A folded repeat names the fragments it stands for beside its own id.
            folded = {
                fragment_id
                for event in read.events
                if event.kind == biography_pb2.ORI_EVENT_KIND_CONSOLIDATED
                for fragment in event.payload["fragments"]
                for fragment_id in [
                    fragment["fragment_id"],
                    *(fragment["repeat_fragment_ids"] if "repeat_fragment_ids" in fragment else []),  # noqa: SIM401 - a Struct has no get()
                ]
            }
            expected = {f.fragment_id for r in handed if r.ori.ori_id == ori_id for f in r.fragments}
            assert expected
            assert folded == expected  # every fragment became part of a durable event, none twice
        # Asking again (a retried hand-over) is idempotent and reports no state loss.
        again = await biography.Consolidate(
            biography_pb2.ConsolidateRequest(
                ori_id=handed[0].ori.ori_id,
                fragments=handed[0].fragments,
                request_id=f"{handed[0].ori.world_id}:{handed[0].tick}:{handed[0].slot}:consolidate",
            ),
            metadata=metadata(),
        )
        assert again.no_state_loss
