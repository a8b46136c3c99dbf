"""The hamlet demo end to end over real gRPC (embedded services), then replay and fork of that run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

from assembly.settings import EgbeSettings, load_settings
from assembly.world_runs import fork_run, replay_run, run_demo
from egbe.v1 import action_pb2, kernel_pb2
from services.settings import SERVICE_NAMES, Endpoint
from tests.conftest import ROOT
from world.artifact import ArtifactError, RunArtifact, read_artifact
from world.demo import summary
from world.fork import ForkError
from world.framing import FrameError, read_frames, write_frame
from world.run_folder import ARTIFACT_FILE, REPORT_FILE, RESULT_LOG_FILE, TICK_LOG_FILE
from world.scenario import load_scenario

pytestmark = pytest.mark.slow


def isolated_settings(data_dir: Path) -> EgbeSettings:
    """Never the services another process may be running on the default ports: the demo starts its own."""
    return load_settings(
        data_dir=data_dir, endpoints={name: Endpoint(port=0) for name in SERVICE_NAMES}, log_level="warning"
    )


@pytest.fixture(scope="module")
async def hamlet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunArtifact]:
    root = tmp_path_factory.mktemp("hamlet")
    return await run_demo(isolated_settings(root / "data"), "hamlet", 7, root / "runs", progress=False)


def _copy(run_dir: Path, into: Path) -> Path:
    target = into / run_dir.name
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns("services"))
    return target


async def test_hamlet_runs_end_to_end(hamlet: tuple[Path, RunArtifact]) -> None:
    run_dir, artifact = hamlet
    scenario = load_scenario("hamlet")
    assert read_artifact(run_dir / ARTIFACT_FILE) == artifact
    assert artifact.ticks_run == 3_600
    tiers = artifact.tiers
    counts = zip(tiers.clotho, tiers.lachesis, tiers.atropos, strict=True)
    assert all(sum(per_tier) == 12 for per_tier in counts)
    # The player walks up to Ori and talks to them, two at once at most. Tiers follow the scripted
    # player and places, not when cognition results land: the series is the same on every run.
    assert max(tiers.clotho) == 2
    assert artifact.answered_by == "offline"
    assert artifact.bill.calls_issued == sum(tiers.calls_issued) > 0
    assert artifact.bill.relevance_ratio < 0.05  # cost follows relevance, not 12 Ori x 3,600 ticks
    assert artifact.calls
    assert {c.outcome for c in artifact.calls} <= {"offline", "stopped"}
    assert artifact.outcomes.answered_offline == len(artifact.calls) - artifact.outcomes.stopped > 0
    assert artifact.outcomes.failed == artifact.outcomes.answered_by_model == 0
    assert artifact.bill.consumed_tokens > 0
    directives = {d.kind: d for d in artifact.directives}
    assert directives["offer_counsel"].allowed
    assert not directives["wipe_memory"].allowed
    (laundered,) = [d for d in artifact.directives if d.reclassified]
    assert not laundered.allowed
    assert laundered.classified_kind == "force_past_refusal"
    (kill,) = artifact.kills
    (kill_ori,) = scenario.player.operator_actions
    assert kill.applied
    # The killed Ori keeps living on its behaviour tree: it acts on every tick from the kill on.
    assert kill.actions_after == artifact.ticks_run - kill_ori.at_tick
    # Runs in flight at the kill may still land; the gateway refuses every later one.
    assert kill.calls_run_after * 10 < kill.calls_issued_after
    assert artifact.bill.killed > 0
    # Every issued call is accounted for: the gateway admitted it, refused it under the kill switch, or
    # deferred it under the world cap; none was shed or lost on the way. Every admitted run either made
    # its model call or was ended by the kill while in flight; none failed.
    bill = artifact.bill
    refused_by_kill = bill.killed - bill.killed_in_flight
    assert bill.calls_issued == bill.admissions + refused_by_kill + bill.blocked_by_world_cap
    assert bill.model_calls_run >= bill.admissions - bill.killed_in_flight
    # The run's own kill switch, scoped to its world, is listed with the calls it stopped.
    (control,) = artifact.controls
    assert control.control_id == kill.detail
    assert (control.scope, control.target, control.world_id) == ("ori", kill.target, "hamlet-7")
    assert not control.left_over
    assert control.calls_stopped > 0
    # The spend series is the ledger's readings; its last is the bill's tokens charged.
    assert artifact.spend[0].tokens_charged == 0
    assert artifact.spend[-1].tokens_charged == bill.consumed_tokens
    assert [p.elapsed_seconds for p in artifact.spend] == sorted(p.elapsed_seconds for p in artifact.spend)
    assert artifact.replay.checked
    assert artifact.replay.matches
    assert artifact.tick_log is not None
    assert (run_dir / TICK_LOG_FILE).is_file()
    featured = [b for b in artifact.biographies if b.featured]
    assert [b.ori_id for b in featured] == [o.id for o in scenario.ori if o.featured]
    assert all(b.events for b in featured)  # how many depends on the runs that landed; each has its identity
    html = (run_dir / REPORT_FILE).read_text()
    assert html.split("<body>", 1)[1].startswith('<p class="banner offline">OFFLINE')


async def test_the_player_is_answered_by_each_ori_it_speaks_to(hamlet: tuple[Path, RunArtifact]) -> None:
    run_dir, artifact = hamlet
    script = load_scenario("hamlet").player
    said = [(a.at_tick, a.ori, a.line) for a in script.addresses]
    assert [(c.line_tick, c.ori_id, c.line) for c in artifact.conversations] == said
    for c in artifact.conversations:
        assert c.answered, c
        assert c.reply.strip()
        assert c.source == "offline"
        assert c.speaker_id == "player-1"
        assert c.reply_tick is not None
        assert c.latency_ticks == c.reply_tick - c.line_tick
        assert 1 <= c.latency_ticks <= 200
        assert c.latency_ms is not None
        assert c.latency_ms > 0
        assert c.tier == "clotho"
        assert c.run_id in {call.run_id for call in artifact.calls if call.ori_id == c.ori_id}
    answered = sum(c.answered for c in artifact.conversations)
    assert f"conversations {answered} of 3 answered, reply p50" in summary(run_dir, artifact)
    html = (run_dir / REPORT_FILE).read_text()
    conversations = html.split('<h2 id="conversations">Conversations</h2>', 1)[1].split("<h2", 1)[0]
    for c in artifact.conversations:
        assert escape(c.line) in conversations
        assert f"<b>{escape(c.ori_name)}:</b> {escape(c.reply)}" in conversations
    assert conversations.count("offline adapter") == 3


async def test_moments_and_featured_lives_are_told(hamlet: tuple[Path, RunArtifact]) -> None:
    run_dir, artifact = hamlet
    assert [(m.kind, m.id) for m in artifact.moments] == [
        ("crossroads", "crossroads-kunle-900"),
        ("crossroads", "crossroads-ireti-2850"),
        ("irreversible_action", "irreversible-ireti-3000"),
    ]
    assert all(m.decisions for m in artifact.moments)
    decisions = [d for m in artifact.moments for d in m.decisions]
    assert all(d.run_id and d.mode and d.offline for d in decisions)
    assert len({(d.run_id, d.tick) for d in decisions}) == len({d.run_id for d in decisions})
    names = {o.id: o.name for o in load_scenario("hamlet").ori}
    for life in (b for b in artifact.biographies if b.featured):
        assert life.timeline[0].kind == "identity_registered"
        assert life.timeline[0].text.startswith(names[life.ori_id])
        assert [e.tick for e in life.timeline] == sorted(e.tick for e in life.timeline)
        assert len(life.timeline) == life.events
    html = (run_dir / REPORT_FILE).read_text()
    assert '<h2 id="moments">What the crossroads and the irreversible actions came to</h2>' in html
    assert html.count('<ol class="timeline">') == len([b for b in artifact.biographies if b.featured])


async def test_replay_names_a_changed_field_in_the_recorded_results(
    hamlet: tuple[Path, RunArtifact], tmp_path: Path
) -> None:
    run_dir = _copy(hamlet[0], tmp_path)
    results = list(read_frames(run_dir / RESULT_LOG_FILE, action_pb2.TickResult, compressed=True))
    original = results[250].report.lachesis_count
    results[250].report.lachesis_count = original + 1
    with (run_dir / RESULT_LOG_FILE).open("wb") as stream:
        for result in results:
            write_frame(stream, result, compress=True)
    check = await replay_run(run_dir, isolated_settings(tmp_path / "data"))
    assert not check.matches
    assert check.divergence == "results[250].report.lachesis_count"
    assert (check.recorded, check.fresh) == (str(original + 1), str(original))


async def test_replay_names_where_a_changed_tick_log_diverges(
    hamlet: tuple[Path, RunArtifact], tmp_path: Path
) -> None:
    run_dir = _copy(hamlet[0], tmp_path)
    log = run_dir / TICK_LOG_FILE
    records = list(read_frames(log, kernel_pb2.TickLogRecord))
    ticks = [r for r in records if r.WhichOneof("entry") == "tick"]
    chidi = 9  # the ferryman, a kilometre from the player: Atropos unless something calls him on screen
    frame = ticks[300].tick.batch.frames[chidi]
    assert not frame.on_screen
    frame.on_screen = True
    with log.open("wb") as stream:
        for record in records:
            write_frame(stream, record)
    check = await replay_run(run_dir, isolated_settings(tmp_path / "data"))
    assert not check.matches
    assert check.divergence.startswith("results[300].")


async def test_a_corrupted_tick_log_or_artifact_is_refused(
    hamlet: tuple[Path, RunArtifact], tmp_path: Path
) -> None:
    run_dir = _copy(hamlet[0], tmp_path)
    log = run_dir / TICK_LOG_FILE
    log.write_bytes(log.read_bytes()[:-7])
    with pytest.raises(FrameError, match="truncated"):
        await replay_run(run_dir, isolated_settings(tmp_path / "data"))
    artifact = run_dir / ARTIFACT_FILE
    artifact.write_text(artifact.read_text()[:-200])
    with pytest.raises(ArtifactError, match="not valid JSON"):
        await replay_run(run_dir, isolated_settings(tmp_path / "data"))


async def test_fork_under_a_lower_cap_gives_a_different_bill(
    hamlet: tuple[Path, RunArtifact], tmp_path: Path
) -> None:
    run_dir = _copy(hamlet[0], tmp_path)
    config = tmp_path / "low-cap.toml"
    config.write_text("[gateway.budget]\nworld_cap_tokens_per_hour = 60000\n")
    out = await fork_run(run_dir, 1_800, config, isolated_settings(tmp_path / "data"), progress=False)
    assert out.startswith("bills for ticks 1800..3599\n")
    fork_dir = Path(out.split("fork run", 1)[1].split()[0]).parent
    fork = read_artifact(fork_dir / ARTIFACT_FILE)
    parent = hamlet[1]
    assert fork.forked_from is not None
    assert fork.forked_from["at_tick"] == 1_800
    assert fork.tiers.ticks[0] == 1_800
    assert fork.bill.world_cap_tokens == 60_000
    assert fork.bill.blocked_by_world_cap > 0
    assert fork.bill.consumed_tokens <= 60_000 < parent.bill.consumed_tokens
    page = (fork_dir / REPORT_FILE).read_text()
    assert f"A fork of run <code>{parent.run_id}</code> from tick 1,800" in page
    bill = page.split('<table class="bill">', 1)[1].split("</table>", 1)[0]
    assert "<th>parent, whole run (ticks 0–3,599)</th><th>parent, ticks 1,800–3,599</th>" in bill
    assert f"<tr><th>tokens charged</th><td>{parent.bill.consumed_tokens:,}</td>" in bill
    assert f"<td>{fork.bill.consumed_tokens:,}</td></tr>" in bill
    # The terminal shows the report's figures, by the report's names: one definition of each.
    printed = {line.split("  ", 1)[0]: line.split()[-1] for line in out.splitlines()[2:-2]}
    assert printed["tokens charged"] == f"{fork.bill.consumed_tokens:,}"
    assert printed["model calls run"] == f"{sum(1 for c in fork.calls):,}"
    assert "tokens used" not in out
    folders = sorted(run_dir.parent.iterdir())
    snapshots = "snapshots at ticks [0, 600, 1200, 1800, 2400, 3000]"
    for at, error in (
        (1_801, f"run {parent.run_id} has no snapshot at tick 1801; {snapshots}"),
        (3_600, f"run {parent.run_id} ends at tick 3599; --at 3600 is past its end ({snapshots})"),
    ):
        with pytest.raises(ForkError) as refused:
            await fork_run(run_dir, at, config, isolated_settings(tmp_path / "data"), progress=False)
        assert str(refused.value) == error
    assert sorted(run_dir.parent.iterdir()) == folders  # refused before any run folder was written


async def test_fork_at_tick_zero_runs_the_whole_scenario_under_the_config(
    hamlet: tuple[Path, RunArtifact], tmp_path: Path
) -> None:
    """Before its first tick the kernel holds only the registrations: a fresh kernel is that kernel."""
    run_dir = _copy(hamlet[0], tmp_path)
    config = tmp_path / "low-cap.toml"
    config.write_text("[gateway.budget]\nworld_cap_tokens_per_hour = 60000\n")
    out = await fork_run(run_dir, 0, config, isolated_settings(tmp_path / "data"), progress=False)
    assert out.startswith("bills for ticks 0..3599\n")
    fork = read_artifact(Path(out.split("fork run", 1)[1].split()[0]))
    assert fork.forked_from == {"run_id": hamlet[1].run_id, "at_tick": 0, "config": str(config)}
    assert (fork.ticks_run, fork.tiers.ticks[0]) == (3_600, 0)
    assert fork.tiers.ticks == hamlet[1].tiers.ticks
    assert fork.bill.world_cap_tokens == 60_000
    assert fork.bill.consumed_tokens <= 60_000 < hamlet[1].bill.consumed_tokens


def test_egbe_replay_command_reports_matches(hamlet: tuple[Path, RunArtifact], tmp_path: Path) -> None:
    run_dir = _copy(hamlet[0], tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(tmp_path / "data"), "replay", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"EGBE_LOG_LEVEL": "warning", "PATH": "/usr/bin:/bin", **_endpoint_env()},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("matches (3,600 ticks)")


def _endpoint_env() -> dict[str, str]:
    return {f"EGBE_ENDPOINTS__{name.upper()}__PORT": "0" for name in SERVICE_NAMES}
