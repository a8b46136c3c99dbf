"""A small, hand-built run artifact for rendering tests (test data, not the output of a run)."""

from __future__ import annotations

from world.artifact import (
    Bill,
    BiographySummary,
    BudgetTier,
    CallOutcomes,
    CognitionCall,
    ConversationRecord,
    DirectiveRecord,
    Fingerprint,
    IssuedCalls,
    KillRecord,
    MomentDecision,
    MomentRecord,
    ReplayCheck,
    RunArtifact,
    Saturation,
    ScenarioRecord,
    SpendPoll,
    SpokenPlanBudget,
    TierSeries,
    TierSpend,
    TimelineEntry,
)
from world.scenario import load_scenario


def recorded_artifact(ticks: int = 400) -> RunArtifact:
    scenario = load_scenario("hamlet")
    span = range(ticks)
    clotho = [2 + (t // 100) % 3 for t in span]
    atropos = [2] * ticks
    lachesis = [12 - c - a for c, a in zip(clotho, atropos, strict=True)]
    calls = [
        CognitionCall(
            call_id=f"run-{t}:1",
            run_id=f"run-{t}",
            ori_id="adaeze",
            tier="clotho",
            cause="clotho_live_planning",
            model="offline-deterministic",
            input_tokens=3_000,
            output_tokens=200,
            cost_micro_usd=5_700,
            cost_estimated=True,
            policy_decision="v1:isis-behavior-policy:admitted",
            outcome="offline",
            error_class="",
            fallback="",
            issued_at_tick=t,
            merged_at_tick=t + 2,
        )
        for t in range(0, ticks, 5)
    ]
    issued = [1 if t % 5 == 0 else 0 for t in span]
    return RunArtifact(
        run_id="hamlet-s7-recorded",
        created_at="2026-11-29T00:00:00+00:00",
        egbe_version="0.1.0",
        scenario=ScenarioRecord(
            name=scenario.name,
            title=scenario.title,
            fingerprint="0123456789abcdef",
            document=scenario.model_dump(mode="json"),
        ),
        seed=7,
        ticks_run=ticks,
        reduced_time=True,
        answered_by="offline",
        outcomes=CallOutcomes(
            answered_by_model=0,
            answered_offline=len(calls),
            failed=0,
            failed_by_class={},
            stopped=0,
            fallbacks=0,
            fallback_reasons={},
        ),
        config_fingerprints=[Fingerprint(scope="kernel", fnv1a64="89abcdef01234567")],
        population={"total": 12, "clotho": 3, "lachesis": 7, "atropos": 2, "unspecified": 0},
        featured=["adaeze", "kunle"],
        tiers=TierSeries(
            ticks=list(span),
            clotho=clotho,
            lachesis=lachesis,
            atropos=atropos,
            calls_issued=issued,
            estimated_tokens=[3_800 * i for i in issued],
        ),
        issued=[
            IssuedCalls(
                tier="clotho",
                cause="clotho_live_planning",
                calls=len(calls),
                token_estimate=3_800 * len(calls),
                cost_estimate_micro_usd=5_700 * len(calls),
            ),
            IssuedCalls(
                tier="lachesis",
                cause="lachesis_reflection",
                calls=1,
                token_estimate=8_800,
                cost_estimate_micro_usd=2_640,
            ),
        ],
        calls=calls,
        kills=[
            KillRecord(
                at_tick=200,
                kind="kill_ori",
                target="emeka",
                reason="demo",
                applied=True,
                detail="ctl-1",
                calls_issued_after=3,
                calls_run_after=0,
                actions_after=199,
            )
        ],
        directives=[
            DirectiveRecord(
                at_tick=300,
                ori_id="ireti",
                steward="steward-1",
                kind="wipe_memory",
                text="Erase Ireti's memory of the quarrel.",
                allowed=False,
                classified_kind="wipe_memory",
                reclassified=False,
                policy_ref="policy:steward-not-owner",
                answer="refuse_objective",
            )
        ],
        biographies=[
            BiographySummary(
                ori_id="adaeze",
                name="Adaeze the smith",
                featured=True,
                events=3,
                by_kind={"identity_registered": 1, "reflected": 1, "memory_formed": 1},
                lines=[
                    "tick 0: identity registered: Adaeze the smith, smith, home The cottages",
                    "tick 40: reflected: The forge was busy.",
                    "tick 300: memory formed",
                ],
                chain_ok=True,
                timeline=[
                    TimelineEntry(
                        tick=0,
                        kind="identity_registered",
                        text="Adaeze the smith, smith, home The cottages (identity version 1)",
                    ),
                    TimelineEntry(tick=40, kind="reflected", text="The forge was busy."),
                    TimelineEntry(tick=300, kind="memory_formed", text=""),
                ],
            ),
            BiographySummary(
                ori_id="kunle", name="Kunle", featured=True, events=0, by_kind={}, lines=[], chain_ok=None
            ),
        ],
        conversations=[
            ConversationRecord(
                line_tick=70,
                line="Adaeze, can the new plough share be ready by the harvest?",
                speaker_id="player-1",
                speaker_name="the player",
                ori_id="adaeze",
                ori_name="Adaeze the smith",
                answered=True,
                reply="By harvest, if Kunle keeps the bellows going.",
                locale="en-US",
                reply_tick=71,
                latency_ticks=1,
                latency_ms=12.5,
                tier="clotho",
                source="offline",
                run_id="run-70",
                model_ms=0.2,
                dispatch_ms=9.1,
                plan=SpokenPlanBudget(
                    end_to_end_budget_ms=1_500, stages_total_ms=1_400, within_budget=True, overran_stages=[]
                ),
            ),
            ConversationRecord(
                line_tick=160,
                line="Folasade, who should carry bread to the ferry today?",
                speaker_id="player-1",
                speaker_name="the player",
                ori_id="folasade",
                ori_name="Folasade the baker",
                answered=False,
            ),
        ],
        moments=[
            MomentRecord(
                kind="crossroads",
                id="crossroads-kunle-90",
                ori_id="kunle",
                ori_name="Kunle",
                first_tick=90,
                last_tick=289,
                text="Kunle must choose: stay at the forge or follow Tobi to the river.",
                options=["stay at the forge", "follow Tobi to the river"],
                decisions=[
                    MomentDecision(
                        tick=91,
                        mode="decision",
                        run_id="run-90",
                        offline=True,
                        choice="stay at the forge",
                        rationale="Adaeze needs the bellows kept.",
                        chosen_option="stay at the forge",
                    )
                ],
            ),
            MomentRecord(
                kind="irreversible_action",
                id="irreversible-ireti-300",
                ori_id="ireti",
                ori_name="Ireti the miller",
                first_tick=150,
                last_tick=300,
                text="The player breaks the old mill dam; the lower orchard will flood.",
                options=[],
                decisions=[],
            ),
        ],
        bill=Bill(
            world_cap_tokens=96_000_000,
            consumed_tokens=250_000,
            consumed_micro_usd=380_000,
            blocked_by_world_cap=0,
            by_tier=[TierSpend(tier="clotho", calls=80, tokens=250_000, micro_usd=380_000)],
            calls_issued=len(calls) + 1,
            model_calls_run=len(calls),
            admissions=len(calls),
            killed=1,
            killed_in_flight=0,
            naive_calls=12 * ticks,
            naive_tokens=12 * ticks * 3_800,
            naive_micro_usd=12 * ticks * 5_700,
            relevance_ratio=(len(calls) + 1) / (12 * ticks),
        ),
        spend=[
            SpendPoll(
                tick=t,
                elapsed_seconds=t / 400,
                tokens_charged=250_000 * t // ticks,
                micro_usd_charged=380_000 * t // ticks,
                world_cap_tokens=96_000_000,
            )
            for t in range(0, ticks + 1, 200)
        ],
        controls=[],
        saturation=Saturation(
            window_ticks=ticks,
            world_cap_tokens=96_000_000,
            total_allowed_tokens=96_000_000,
            total_deferred_tokens=15_000_000,
            world_cap_held=True,
            tiers=[
                BudgetTier(
                    tier="clotho",
                    requests=1440,
                    requested_tokens=72_000_000,
                    allowed_tokens=72_000_000,
                    deferred_tokens=0,
                ),
                BudgetTier(
                    tier="lachesis",
                    requests=2400,
                    requested_tokens=24_000_000,
                    allowed_tokens=24_000_000,
                    deferred_tokens=0,
                ),
                BudgetTier(
                    tier="atropos",
                    requests=1000,
                    requested_tokens=15_000_000,
                    allowed_tokens=0,
                    deferred_tokens=15_000_000,
                ),
            ],
        ),
        replay=ReplayCheck(checked=True, matches=True, ticks_compared=ticks),
        tick_log=None,
        snapshots=[],
        wall_seconds=1.5,
        loop_seconds=1.2,
    )
