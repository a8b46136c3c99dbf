"""The monitoring overlay: the ServiceMonitor finds a metrics port on every shared service, the
network policy opens exactly those ports to the monitoring namespace, and the Grafana dashboard
queries only metric families the services export."""

from __future__ import annotations

import json
import re
from typing import Any

from assembly.settings import EgbeSettings
from tests.conftest import ROOT
from tests.deploy.conftest import K8S, render

SHARED_SERVICES = ("gateway", "cognition", "policy", "biography")
SOURCES = (
    "services",
    "kernel_service",
    "gateway",
    "cognition_service",
    "policy_service",
    "biography_service",
)


def _named(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def test_the_service_monitor_scrapes_each_shared_service_on_its_settings_metrics_port() -> None:
    manifests = render("monitoring")
    [monitor] = _named(manifests, "ServiceMonitor").values()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = {
        name: service
        for name, service in _named(manifests, "Service").items()
        if selector.items() <= service["metadata"]["labels"].items()
        and any(p["name"] == "metrics" for p in service["spec"]["ports"])
    }
    assert sorted(selected) == sorted(SHARED_SERVICES)
    defaults = EgbeSettings().endpoints
    workloads = _named(manifests, "Deployment") | _named(manifests, "StatefulSet")
    policy = _named(manifests, "NetworkPolicy")["metrics-ingress"]
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    for name, service in selected.items():
        [port] = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
        assert port["port"] == defaults[name].metrics_port
        container = workloads[name]["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "metrics", "containerPort": port["port"], "protocol": "TCP"} in container["ports"]
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        configured = env.get(f"EGBE_ENDPOINTS__{name.upper()}__METRICS_PORT")
        assert configured is None or int(configured) == port["port"]
    assert opened == {defaults[name].metrics_port for name in SHARED_SERVICES}


def test_the_dashboard_queries_only_families_the_services_export() -> None:
    dashboard = json.loads((K8S / "overlays" / "monitoring" / "egbe-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    families = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for e in exprs
        for name in re.findall(r"egbe_[a-z_]+", e)
    }
    code = "\n".join(p.read_text() for package in SOURCES for p in (ROOT / package).rglob("*.py"))
    missing = sorted(f for f in families if f'"{f}"' not in code)
    assert missing == []
    assert len(families) >= 10
