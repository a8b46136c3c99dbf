"""What the Kubernetes manifests promise: probes on gRPC health, hardened pods, autoscaling,
disruption budgets, settings that load, and network policy that admits exactly the documented calls.

The JSON-schema validation of the same renders runs in `make deploy-check` (kubernetes-validate).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from assembly.settings import EgbeSettings, load_settings
from scripts.make_dev_certs import issue_ca, issue_certificate
from tests.deploy.conftest import render

Manifest = dict[str, Any]
SHARED_SERVICES = ("gateway", "cognition", "policy", "biography")
OPERATOR_PORT = 50056


def _of_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def _workloads(manifests: list[Manifest]) -> dict[str, Manifest]:
    """Deployments and StatefulSets (the gateway's), by name."""
    return _of_kind(manifests, "Deployment") | _of_kind(manifests, "StatefulSet")


def _default_port(service: str) -> int:
    return EgbeSettings().endpoints[service].port


def _containers(deployment: Manifest) -> list[Manifest]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _env(container: Manifest) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_each_shared_service_serves_itself_on_its_settings_port(
    rendered: tuple[str, list[Manifest]],
) -> None:
    _, manifests = rendered
    deployments = _workloads(manifests)
    services = _of_kind(manifests, "Service")
    for name in SHARED_SERVICES:
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["serve", name]
        assert _env(container)[f"EGBE_ENDPOINTS__{name.upper()}__HOST"] == "0.0.0.0"  # noqa: S104
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["grpc"] == _default_port(name)
        assert services[name]["spec"]["ports"][0]["port"] == _default_port(name)


def test_probes_ask_grpc_health(rendered: tuple[str, list[Manifest]]) -> None:
    tree, manifests = rendered
    deployments = _workloads(manifests)
    for name in SHARED_SERVICES:
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        for probe in ("readinessProbe", "livenessProbe"):
            if tree == "base":  # kubelet's own gRPC health probe (plaintext)
                assert container[probe]["grpc"]["port"] == _default_port(name), (name, probe)
            else:  # under mTLS kubelet cannot speak to the port; `egbe probe` dials with the pod's cert
                assert container[probe]["exec"]["command"][:2] == ["egbe", "probe"], (name, probe)


def test_every_container_is_non_root_read_only_and_unprivileged(
    rendered: tuple[str, list[Manifest]],
) -> None:
    _, manifests = rendered
    for name, deployment in _workloads(manifests).items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["automountServiceAccountToken"] is False, name
        for container in _containers(deployment):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, (name, container["name"])
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (name, container["name"])
            assert "memory" in container["resources"]["limits"], (name, container["name"])


def test_gateway_and_cognition_autoscale_and_every_shared_service_has_a_disruption_budget(
    rendered: tuple[str, list[Manifest]],
) -> None:
    _, manifests = rendered
    deployments = _workloads(manifests)
    autoscalers = _of_kind(manifests, "HorizontalPodAutoscaler")
    assert set(autoscalers) == {"gateway", "cognition"}
    for name, hpa in autoscalers.items():
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
        assert hpa["spec"]["scaleTargetRef"]["kind"] == deployments[name]["kind"]
        assert "replicas" not in deployments[name]["spec"], "the HPA owns the replica count"
        assert hpa["spec"]["minReplicas"] >= 2
    budgets = _of_kind(manifests, "PodDisruptionBudget")
    for name in SHARED_SERVICES:
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_a_replaced_gateway_pod_keeps_its_lease_holder_name(rendered: tuple[str, list[Manifest]]) -> None:
    """A gateway replaced after a crash must come back under its predecessor's lease holder id, so it
    settles what that one left leased before serving (docs/gateway.md): a StatefulSet keeps the pod's
    name, and the holder is the pod's name."""
    _, manifests = rendered
    gateway = _of_kind(manifests, "StatefulSet")["gateway"]
    assert gateway["spec"]["podManagementPolicy"] == "Parallel"  # scales like a Deployment
    governing = _of_kind(manifests, "Service")[gateway["spec"]["serviceName"]]
    assert governing["spec"]["clusterIP"] == "None"
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    holder = {e["name"]: e for e in container["env"]}["EGBE_GATEWAY__LEASE__HOLDER"]
    assert holder["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_services_select_pods_and_name_real_ports(rendered: tuple[str, list[Manifest]]) -> None:
    _, manifests = rendered
    templates = [d["spec"]["template"] for d in _workloads(manifests).values()]
    for name, service in _of_kind(manifests, "Service").items():
        selected = [
            t for t in templates if service["spec"]["selector"].items() <= t["metadata"]["labels"].items()
        ]
        assert selected, f"Service {name} selects no pod"
        port_names = {
            p["name"] for t in selected for c in t["spec"]["containers"] for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (name, port)


def test_only_the_gateway_holds_the_model_key(rendered: tuple[str, list[Manifest]]) -> None:
    _, manifests = rendered
    for name, deployment in _workloads(manifests).items():
        for container in _containers(deployment):
            has_key = "ANTHROPIC_API_KEY" in _env(container)
            assert has_key == (name == "gateway"), (name, container["name"])


def _pod_settings(
    container: Manifest, config_maps: dict[str, Manifest], stand_ins: dict[str, str]
) -> EgbeSettings:
    """The settings an `egbe` container would load: its ConfigMap env, its own env, files stood in."""
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environment |= config_maps[source["configMapRef"]["name"]]["data"]
    environment |= _env(container)
    environment |= {key: path for key, path in stand_ins.items() if key in environment}
    with pytest.MonkeyPatch.context() as env:
        for key, value in environment.items():
            env.setenv(key, value)
        return load_settings()


def _stand_ins(config_maps: dict[str, Manifest], tmp_path: Path) -> dict[str, str]:
    """Files named by the environment exist only in the pod; local stand-ins for them."""
    (toml_text,) = [m["data"]["egbe.toml"] for m in config_maps.values() if "egbe.toml" in m["data"]]
    config_file = tmp_path / "egbe.toml"
    config_file.write_text(toml_text)
    ca_file, ca_key = issue_ca(tmp_path)
    stand_in = issue_certificate(tmp_path, "gateway", ca_file, ca_key)
    return {
        "EGBE_CONFIG_FILE": str(config_file),
        "EGBE_TLS__CERT_FILE": str(stand_in.cert_file),
        "EGBE_TLS__KEY_FILE": str(stand_in.key_file),
        "EGBE_TLS__CA_FILE": str(ca_file),
    }


def test_every_egbe_container_loads_its_settings(
    rendered: tuple[str, list[Manifest]], tmp_path: Path
) -> None:
    tree, manifests = rendered
    config_maps = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ConfigMap"}
    stand_ins = _stand_ins(config_maps, tmp_path)
    checked = set()
    for deployment in _workloads(manifests).values():
        for container in _containers(deployment):
            if container.get("args", [""])[0] != "serve":
                continue
            service = container["args"][1]
            settings = _pod_settings(container, config_maps, stand_ins)
            assert settings.mode.value == "production"
            assert settings.tls.mode.value == ("off" if tree == "base" else "mtls")
            own = settings.endpoints[service]
            assert own.host == "0.0.0.0" or own.unix_socket is not None, service  # noqa: S104
            for name in set(SHARED_SERVICES) - {service}:
                assert settings.endpoints[name].target() == f"{name}:{_default_port(name)}"
            if service == "kernel":  # it makes the calls it issues: wired to the three Services
                assert settings.kernel.gateway_target == f"gateway:{_default_port('gateway')}"
                assert settings.kernel.biography_target == f"biography:{_default_port('biography')}"
                assert settings.kernel.policy_target == f"policy:{_default_port('policy')}"
            checked.add(service)
    assert checked >= set(SHARED_SERVICES) | ({"kernel"} if tree == "world-server-example" else set())


def test_world_server_example_runs_the_kernel_as_a_sidecar_on_a_shared_socket() -> None:
    manifests = render("world-server-example")
    pod = _workloads(manifests)["world-server"]["spec"]["template"]["spec"]
    kernel, _edge = pod["initContainers"]  # the kernel starts first
    assert kernel["restartPolicy"] == "Always"
    assert kernel["args"] == ["serve", "kernel"]
    socket = _env(kernel)["EGBE_ENDPOINTS__KERNEL__UNIX_SOCKET"]
    (world,) = pod["containers"]
    assert _env(world)["EGBE_KERNEL_TARGET"] == f"unix://{socket}"
    kernel_mounts = {m["name"]: m["mountPath"] for m in kernel["volumeMounts"]}
    world_mounts = {m["name"]: m["mountPath"] for m in world["volumeMounts"]}
    shared = {name for name in kernel_mounts if world_mounts.get(name) == kernel_mounts[name]}
    assert any(socket.startswith(kernel_mounts[name] + "/") for name in shared)


def test_world_server_example_runs_the_edge_as_a_loopback_sidecar_to_its_kernel(tmp_path: Path) -> None:
    """The edge (`egbe edge`) serves only its pod, dials the kernel's socket and the shared Services,
    and holds no token: the engine's own token travels through it."""
    manifests = render("world-server-example")
    config_maps = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ConfigMap"}
    pod = _workloads(manifests)["world-server"]["spec"]["template"]["spec"]
    kernel, edge = pod["initContainers"]
    (world,) = pod["containers"]
    assert (edge["args"], edge["restartPolicy"]) == (["edge"], "Always")
    settings = _pod_settings(edge, config_maps, _stand_ins(config_maps, tmp_path))
    assert settings.edge.host == "127.0.0.1"
    assert _env(world)["EGBE_EDGE_URL"] == f"http://127.0.0.1:{settings.edge.port}"
    socket = _env(kernel)["EGBE_ENDPOINTS__KERNEL__UNIX_SOCKET"]
    assert settings.endpoints["kernel"].target() == f"unix:{socket}"
    for name in SHARED_SERVICES:
        assert settings.endpoints[name].target() == f"{name}:{_default_port(name)}"
    mounts = {m["name"] for m in edge["volumeMounts"]}
    assert "kernel-socket" in mounts
    assert "tokens" not in mounts


# ---- network policy, evaluated the way the NetworkPolicy API defines it ----


@dataclass(frozen=True)
class Pod:
    name: str
    labels: dict[str, str] = field(hash=False)
    namespace: str = "egbe"


Peer = Pod | ipaddress.IPv4Address


def _selects(selector: Manifest, labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise NotImplementedError(f"selector form {sorted(selector)} is not modelled by this test")
    return selector.get("matchLabels", {}).items() <= labels.items()


def _peer_matches(rule_peer: Manifest, peer: Peer, namespace: str) -> bool:
    if "ipBlock" in rule_peer:
        if not isinstance(peer, ipaddress.IPv4Address):
            return False
        block = rule_peer["ipBlock"]
        excepted = any(peer in ipaddress.ip_network(cidr) for cidr in block.get("except", []))
        return peer in ipaddress.ip_network(block["cidr"]) and not excepted
    if not isinstance(peer, Pod):
        return False
    if "namespaceSelector" not in rule_peer and peer.namespace != namespace:
        return False
    return _selects(rule_peer.get("podSelector", {}), peer.labels)


def _rule_admits(rule: Manifest, peers_key: str, peer: Peer, port: int, namespace: str) -> bool:
    ports = rule.get("ports")
    if ports is not None and not any(
        p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports
    ):
        return False
    peers = rule.get(peers_key)
    return peers is None or any(_peer_matches(p, peer, namespace) for p in peers)


def _direction_allows(policies: list[Manifest], subject: Pod, direction: str, peer: Peer, port: int) -> bool:
    """A pod no policy of this direction selects is open; otherwise some rule must admit."""
    key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    selecting = [
        p
        for p in policies
        if direction in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], subject.labels)
    ]
    if not selecting:
        return True
    return any(
        _rule_admits(rule, peers_key, peer, port, subject.namespace)
        for policy in selecting
        for rule in policy["spec"].get(key, [])
    )


def connects(policies: list[Manifest], source: Pod, destination: Peer, port: int) -> bool:
    if not _direction_allows(policies, source, "Egress", destination, port):
        return False
    if isinstance(destination, Pod):
        return _direction_allows(policies, destination, "Ingress", source, port)
    return True


@pytest.fixture(scope="module")
def production_network() -> tuple[list[Manifest], dict[str, Pod]]:
    manifests = render("world-server-example")
    pods = {
        name: Pod(name, d["spec"]["template"]["metadata"]["labels"])
        for name, d in _workloads(manifests).items()
    }
    pods["operator"] = Pod("operator", {"egbe.dev/operator": "true"})
    pods["intruder"] = Pod("intruder", {"app": "something-else"})
    policies = list(_of_kind(manifests, "NetworkPolicy").values())
    return policies, pods


ANTHROPIC_LIKE = ipaddress.IPv4Address("160.79.104.10")  # a public address on 443
PRIVATE = ipaddress.IPv4Address("10.1.2.3")

DOCUMENTED_CALLS = [
    ("world-server", "gateway", 50052),
    ("world-server", "biography", 50055),
    ("world-server", "policy", 50054),
    ("cognition", "gateway", 50052),
    ("gateway", "cognition", 50053),
    ("cognition", "policy", 50054),
    ("cognition", "biography", 50055),
    ("operator", "gateway", OPERATOR_PORT),
]


def test_documented_calls_are_admitted(production_network: tuple[list[Manifest], dict[str, Pod]]) -> None:
    policies, pods = production_network
    for source, destination, port in DOCUMENTED_CALLS:
        assert connects(policies, pods[source], pods[destination], port), (source, destination, port)


def test_nothing_else_between_pods_is_admitted(
    production_network: tuple[list[Manifest], dict[str, Pod]],
) -> None:
    policies, pods = production_network
    ports = {port for _, _, port in DOCUMENTED_CALLS}
    for source in pods.values():
        for destination in pods.values():
            for port in ports:
                expected = (source.name, destination.name, port) in DOCUMENTED_CALLS
                assert connects(policies, source, destination, port) == expected, (
                    source.name,
                    destination.name,
                    port,
                )


def test_only_operators_reach_the_operator_port(
    production_network: tuple[list[Manifest], dict[str, Pod]],
) -> None:
    policies, pods = production_network
    reaching = {name for name, pod in pods.items() if connects(policies, pod, pods["gateway"], OPERATOR_PORT)}
    assert reaching == {"operator"}


def test_only_the_gateway_reaches_the_model_egress(
    production_network: tuple[list[Manifest], dict[str, Pod]],
) -> None:
    policies, pods = production_network
    reaching = {name for name, pod in pods.items() if connects(policies, pod, ANTHROPIC_LIKE, 443)}
    assert reaching == {"gateway"}
    assert not connects(policies, pods["gateway"], ANTHROPIC_LIKE, 80)
    assert not connects(policies, pods["gateway"], PRIVATE, 443)


def test_database_is_reached_only_by_its_users(
    production_network: tuple[list[Manifest], dict[str, Pod]],
) -> None:
    policies, pods = production_network
    reaching = {name for name, pod in pods.items() if connects(policies, pod, PRIVATE, 5432)}
    assert reaching == {"gateway", "biography"}
    assert not connects(policies, pods["world-server"], PRIVATE, 5432)
