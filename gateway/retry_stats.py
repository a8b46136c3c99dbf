"""The retry-statistics rollup over recent runs, shaped like the Paracosm reference's /retry-stats."""

from __future__ import annotations

from collections import Counter
from typing import Any


def roll_up(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum per-run stats: calls/attempts/fallbacks per schema, provider errors by class, fallbacks by the
    provider fallen back from, cache tokens."""
    schemas: dict[str, Counter[str]] = {}
    schema_runs: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    error_runs = fallback_runs = cache_runs = 0
    read = creation = 0
    for run in runs:
        for name, figures in run.get("schemas", {}).items():
            schemas.setdefault(name, Counter()).update(
                {k: int(figures.get(k, 0)) for k in ("calls", "attempts", "fallbacks")}
            )
            schema_runs[name] += 1
        run_errors = run.get("providerErrors", {})
        errors.update({k: int(v) for k, v in run_errors.items()})
        error_runs += int(bool(run_errors))
        run_fallbacks = run.get("providerFallbacks", {})
        fallbacks.update({k: int(v) for k, v in run_fallbacks.items()})
        fallback_runs += int(bool(run_fallbacks))
        caches = run.get("caches", {})
        if caches.get("readTokens") or caches.get("creationTokens"):
            cache_runs += 1
            read += int(caches.get("readTokens", 0))
            creation += int(caches.get("creationTokens", 0))
    return {
        "runCount": len(runs),
        "schemas": {
            name: {
                "calls": c["calls"],
                "attempts": c["attempts"],
                "fallbacks": c["fallbacks"],
                "avgAttempts": round(c["attempts"] / c["calls"], 4) if c["calls"] else 0.0,
                "fallbackRate": round(c["fallbacks"] / c["calls"], 4) if c["calls"] else 0.0,
                "runsPresent": schema_runs[name],
            }
            for name, c in sorted(schemas.items())
        },
        "providerErrors": {
            **dict(sorted(errors.items())),
            "total": sum(errors.values()),
            "runsPresent": error_runs,
        },
        "providerFallbacks": {
            **dict(sorted(fallbacks.items())),
            "total": sum(fallbacks.values()),
            "runsPresent": fallback_runs,
        },
        "caches": {
            "totalReadTokens": read,
            "totalCreationTokens": creation,
            "readRatio": round(read / (read + creation), 4) if read + creation else 0.0,
            "runsPresent": cache_runs,
        },
    }
