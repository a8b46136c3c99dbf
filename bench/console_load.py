"""Console load: what a watched operator console costs the services, and whether its pages keep up.

Prints one JSON object with two measurements:
- `gateway`: `bench.gateway_overhead`'s latency and rate figures on an `egbe serve gateway` (SQLite,
  offline adapter), first with no console, then on a fresh gateway with `egbe console` (its own process)
  watched by `--viewers` event streams (one on the Worlds page, the rest on the world the bench's runs
  fill), back to back; after each, the gateway's CPU share while nothing else calls it (the console still
  watching), and the console's own share, idle and while the runs stream. The console follows the world
  those runs fill through one `WatchAudit` stream, paced to its poll (the newest 50 records at most
  every 0.25 s, the rest counted).
- `solo`: `egbe up` (console included) and the solo-ceiling scenario reduced (1,424 Ori, 600 ticks) run
  by `egbe demo --target running`, first unwatched, then (a fresh `egbe up`) watched by the viewers and by
  Chromium on the world's page: the demo's wall time either way; for the watched run, the event streams'
  messages, bytes and longest silence, the server-rendered world page's time to answer while the run
  streams, the browser page's longest frame and frames over 50 ms, the rows it keeps, and how many
  operator-audit rows the console's reads added.

    .venv/bin/python -m bench.console_load --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx

from bench.biography_append import process_cpu_seconds
from bench.gateway_overhead import _start_bare, measure
from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
SOLO_WORLD = "solo-ceiling-7"
SETTLE_SECONDS = 5.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


@dataclass
class Viewer:
    """One signed-in event stream: when each message came and how big it was."""

    arrivals: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


async def sign_in(client: httpx.AsyncClient, token: str) -> None:
    page = await client.get("/signin")
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match is not None
    answer = await client.post(
        "/signin",
        data={"csrf_token": match.group(1), "name": "bench", "token": token},
        headers={"Origin": str(client.base_url).rstrip("/")},
    )
    assert answer.status_code == 303, answer.text


async def follow(url: str, token: str, path: str, viewer: Viewer) -> None:
    """Read one event stream until cancelled."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30.0, read=60.0)) as client:
        await sign_in(client, token)
        async with client.stream("GET", path) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    viewer.arrivals.append(time.monotonic())
                    viewer.sizes.append(len(line))


def summarize(viewers: list[Viewer], since: float, until: float) -> dict[str, Any]:
    gaps = [
        b - a
        for v in viewers
        for a, b in zip([since, *v.arrivals], [*v.arrivals, until], strict=True)
        if since <= b <= until
    ]
    return {
        "messages_per_viewer_per_s": round(
            sum(len(v.arrivals) for v in viewers) / len(viewers) / max(0.001, until - since), 2
        ),
        "bytes_per_viewer_per_s": round(sum(sum(v.sizes) for v in viewers) / len(viewers) / (until - since)),
        "largest_message_bytes": max((max(v.sizes) for v in viewers if v.sizes), default=0),
        "longest_silence_s": round(max(gaps, default=0.0), 3),
    }


def start_console(env: dict[str, str], data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "console", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split()[-1].rstrip("/")


async def watched_by(
    url: str, token: str, viewers: int, world: str
) -> tuple[list[Viewer], list[asyncio.Task[None]]]:
    """`viewers` event streams: one on every world, the rest on `world`; cancel the tasks to stop them."""
    followers = [Viewer() for _ in range(viewers)]
    tasks = [
        asyncio.create_task(follow(url, token, "/events/worlds" if n == 0 else f"/events/worlds/{world}", v))
        for n, v in enumerate(followers)
    ]
    await asyncio.sleep(1.0)
    return followers, tasks


async def stop_watching(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    failures = [
        r
        for r in await asyncio.gather(*tasks, return_exceptions=True)
        if not isinstance(r, asyncio.CancelledError)
    ]
    if failures:
        raise RuntimeError(f"an event stream failed: {failures[0]!r}")


async def bench_gateway(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "without_console": await gateway_run(args, watched=False),
        "with_console_watched": await gateway_run(args, watched=True),
    }


async def gateway_run(args: argparse.Namespace, *, watched: bool) -> dict[str, Any]:
    """`bench.gateway_overhead`'s figures on a fresh gateway (an empty store: neither run measures a store
    the other grew), with or without a watched console; then the gateway's CPU share while nothing else
    calls it (and the console still watches)."""
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as folder:
        cap = {"EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR": str(10**12)}
        served = ServiceProcesses(Path(folder), None, extra_env=cap)
        bare, bare_target = _start_bare()
        console, report = None, {}
        try:
            served.start("gateway")
            pids = (served.running["gateway"].pid, bare.pid)
            await asyncio.sleep(SETTLE_SECONDS)
            if watched:
                console, url = start_console(served.env(), Path(folder) / "console")
                followers, tasks = await watched_by(url, served.tokens["operator"], args.viewers, "bench")
                report["idle_console_cpu_share"] = await cpu_share(console.pid)
                console_cpu = process_cpu_seconds(console.pid)
            started = time.monotonic()
            run = await measure(served.target("gateway"), bare_target, pids, served.tokens, args)
            if console is not None:
                ended = time.monotonic()
                report["busy_console_cpu_share"] = round(
                    (process_cpu_seconds(console.pid) - console_cpu) / (ended - started), 3
                )
                report["streams"] = summarize(followers, started, ended)
            await asyncio.sleep(SETTLE_SECONDS)  # the runs the rate phases left open are ended
            report["idle_gateway_cpu_share"] = await cpu_share(pids[0])
            if console is not None:
                await stop_watching(tasks)
        finally:
            if console is not None:
                console.terminate()
                console.wait(timeout=15)
            bare.kill()
            bare.wait()
            served.stop_all()
    latency, phases = run["latency"], run["phases"]
    own = [(t - m) * 1000 for t, m in zip(latency["stream_run"], run["model"]["stream_run"], strict=True)]
    return {
        "overhead_p50_ms": round(_percentile(own, 0.5), 3),
        "overhead_p99_ms": round(_percentile(own, 0.99), 3),
        "admissions_per_s": round(phases["stream_admissions"].per_s, 1),
        "fused_runs_per_s": round(phases["stream_fused_runs"].per_s, 1),
        "gateway_cpu_us_per_admission": round(phases["stream_admissions"].server_cpu_us, 1),
        "gateway_cpu_us_per_fused_run": round(phases["stream_fused_runs"].server_cpu_us, 1),
        **report,
    }


async def cpu_share(pid: int, seconds: float = 5.0) -> float:
    """The share of one core a process uses over `seconds` (from /proc)."""
    before = process_cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return round((process_cpu_seconds(pid) - before) / seconds, 3)


def start_up(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any], dict[str, str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "up", "--ephemeral-ports"],
        env={k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {"EGBE_LOG_LEVEL": "warning"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoints = data_dir / "endpoints.json"
    while not (endpoints.is_file() and json.loads(endpoints.read_text()).get("pid") == process.pid):
        time.sleep(0.1)
    return process, json.loads(endpoints.read_text()), json.loads((data_dir / "tokens.json").read_text())


def demo(data_dir: Path, runs: Path) -> subprocess.Popen[bytes]:
    command = ["demo", "--scenario", "solo-ceiling", "--reduced-time", "--target", "running", "--quiet"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "assembly.cli",
            "--data-dir",
            str(data_dir),
            *command,
            "--runs-dir",
            str(runs),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def browser_frames(url: str, token: str, stop: asyncio.Event, out: dict[str, Any]) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = await browser.new_page()
        await page.goto(f"{url}/signin")
        await page.fill("input[name=name]", "bench")
        await page.fill("input[name=token]", token)
        await page.click("button:has-text('Sign in')")
        await page.goto(f"{url}/worlds/{SOLO_WORLD}")
        await page.evaluate(
            "window.__frames = []; (function tick(t0) { requestAnimationFrame((t) => {"
            " if (t0) window.__frames.push(t - t0); tick(t); }); })()"
        )
        await stop.wait()
        frames: list[float] = await page.evaluate("window.__frames")
        out["longest_frame_ms"] = round(max(frames, default=0.0), 1)
        out["frames_over_50_ms"] = sum(1 for f in frames if f > 50)
        out["frames"] = len(frames)
        out["rows_kept"] = await page.locator("#stream-body tr").count()
        await browser.close()


async def bench_solo(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for label in ("unwatched", "watched"):
        with tempfile.TemporaryDirectory(prefix="egbe-bench-") as folder:
            up, endpoints, tokens = start_up(Path(folder) / "data")
            url = endpoints["console"].rstrip("/")
            try:
                followers: list[Viewer] = []
                streams: list[asyncio.Task[None]] = []
                page_times: list[float] = []
                browser: dict[str, Any] = {}
                stop = asyncio.Event()
                watching = None
                if label == "watched":
                    followers, streams = await watched_by(url, tokens["operator"], args.viewers, SOLO_WORLD)
                    watching = asyncio.create_task(browser_frames(url, tokens["operator"], stop, browser))
                started = time.monotonic()
                running = demo(Path(folder) / "data", Path(folder) / "runs")
                async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                    await sign_in(client, tokens["operator"])
                    while running.poll() is None:
                        if label == "watched":
                            asked = time.monotonic()
                            await client.get(f"/worlds/{SOLO_WORLD}")
                            page_times.append(time.monotonic() - asked)
                        await asyncio.sleep(0.5)
                wall = time.monotonic() - started
                stop.set()
                if watching is not None:
                    await watching
                await stop_watching(streams)
                entry: dict[str, Any] = {"demo_wall_s": round(wall, 1), "demo_exit": running.returncode}
                if label == "watched":
                    entry |= summarize(followers, started, started + wall)
                    entry["world_page_p50_ms"] = round(_percentile(page_times, 0.5) * 1000, 1)
                    entry["world_page_max_ms"] = round(max(page_times, default=0.0) * 1000, 1)
                    entry["browser"] = browser
                    entry["console_audit_rows"] = console_rows(endpoints["gateway"], tokens["operator"])
                report[label] = entry
            finally:
                up.terminate()
                up.wait(timeout=30)
    return report


def console_rows(gateway: str, token: str) -> int:
    """Operator-audit rows the console's own reads wrote (audited under the name "console")."""
    count, page_token = 0, ""
    with grpc.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.OperatorServiceStub(channel)
        while True:
            page = stub.ListOperatorAttempts(
                gateway_pb2.ListOperatorAttemptsRequest(
                    operator_id="console", page_size=1000, page_token=page_token
                ),
                metadata=bearer_metadata(token),
            )
            count += len(page.attempts)
            page_token = page.next_page_token
            if not page_token:
                return count


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "console_load",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "viewers": args.viewers,
        "poll_interval_s": 0.25,
    }
    if args.part in ("all", "gateway"):
        report["gateway"] = await bench_gateway(args)
    if args.part in ("all", "solo"):
        report["solo"] = await bench_solo(args)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object only")
    parser.add_argument("--viewers", type=int, default=10, help="event streams watching (default 10)")
    parser.add_argument("--runs", type=int, default=300, help="sequential runs for the latency figures")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each rate phase runs")
    parser.add_argument("--part", choices=["all", "gateway", "solo"], default="all", help="what to measure")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), indent=None if args.json else 2))


if __name__ == "__main__":
    main()
