"""deploy/: the compose topology, topics, worker image and Kubernetes manifests are coherent.

What this proves: compose.yaml parses and references only images (pinned), files, services,
volumes and variables that exist; Kafka runs in KRaft mode with enough nodes for the topics'
replication; two or more workers run the contract command with the spec mounted; Prometheus
scrapes exactly the worker services on 6066 and loads the shipped rules; Grafana's provisioning
points at the shipped dashboards; topics.conf follows the retention/compaction and
co-partitioning rules; the StatefulSet has persistent volumes, /status readiness and resources;
the guides mention every topic and carry the replay command.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
WORKER_COMMAND = ["worker", "--config", "/etc/streamdp/streams.toml"]
CONTRACT_TOPICS = {
    "streamdp.releases",
    "streamdp.consistent",
    "streamdp.dead-letter",
    "streamdp.control",
}


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def topics() -> dict[str, dict[str, Any]]:
    table = {}
    for line in (DEPLOY / "kafka" / "topics.conf").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, partitions, replication, data, configs = line.split()
        table[name] = {
            "partitions": int(partitions),
            "replication": int(replication),
            "data": data,
            "configs": dict(pair.split("=", 1) for pair in configs.split(",")),
        }
    return table


def services_with(prefix: str) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose()["services"].items() if n.startswith(prefix)}


def test_compose_references_only_existing_things() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    doc = compose()
    services = doc["services"]
    volumes = set(doc.get("volumes", {}))
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "image" in service and "build" not in service:
            image = service["image"]
            assert re.fullmatch(r"[\w./-]+:[\w.-]+", image), f"{name}: unpinned image {image}"
            assert not image.endswith(":latest"), name
        if "build" in service:
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file(), name
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: missing {source}"
            else:
                assert source in volumes, f"{name}: undeclared volume {source}"
        depends = service.get("depends_on", {})
        for other in depends if isinstance(depends, list) else depends.keys():
            assert other in services, f"{name} depends on unknown service {other}"
    # every ${VAR} has a default (:-) or fails with a message (:?)
    for match in re.finditer(r"\$\{([^}]*)\}", text):
        assert re.fullmatch(r"\w+(:-[^}]*|:\?.+)", match.group(1)), match.group(0)
    # published ports bind to loopback only
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on all addresses"


def test_kafka_is_kraft_with_enough_nodes_for_replication() -> None:
    nodes = services_with("kafka-")
    brokers = {n: s for n, s in nodes.items() if n != "kafka-init"}
    assert len(brokers) >= 3
    for name, service in nodes.items():
        assert service["image"].startswith("apache/kafka:"), name
    voters = set()
    for name, service in brokers.items():
        env = service["environment"]
        assert "controller" in env["KAFKA_PROCESS_ROLES"]
        assert "ZOOKEEPER" not in " ".join(env), name
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        assert f"PLAINTEXT://{name}:9092" == env["KAFKA_ADVERTISED_LISTENERS"]
    assert len(voters) == 1
    assert {v.split("@")[1].split(":")[0] for v in voters.pop().split(",")} == set(brokers)
    for name, topic in topics().items():
        assert topic["replication"] <= len(brokers), name
        assert int(topic["configs"]["min.insync.replicas"]) < topic["replication"], name
    init = nodes["kafka-init"]
    assert init["entrypoint"][-1] == "/streamdp/kafka/create-topics.sh"
    assert "./kafka:/streamdp/kafka:ro" in init["volumes"]


def test_workers_run_the_contract_command_and_are_scraped() -> None:
    workers = services_with("worker-")
    assert len(workers) >= 2
    brokers = {n for n in services_with("kafka-") if n != "kafka-init"}
    for name, service in workers.items():
        assert service["command"] == WORKER_COMMAND, name
        assert "./streamdp/streams.toml:/etc/streamdp/streams.toml:ro" in service["volumes"]
        assert any(v.endswith(":/var/lib/streamdp") for v in service["volumes"]), name
        env = service["environment"]
        assert {h.split(":")[0] for h in env["STREAMDP_BOOTSTRAP"].split(",")} == brokers
        assert env["STREAMDP_WEB_PORT"] == "6066"
        assert service["depends_on"]["kafka-init"]["condition"] == (
            "service_completed_successfully"
        )
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "streamdp")
    assert set(job["static_configs"][0]["targets"]) == {f"{w}:6066" for w in workers}
    assert prometheus["rule_files"] == ["alerts.yml"]
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["streamdp"]' in dockerfile
    assert "EXPOSE 6066" in dockerfile
    assert f"CMD {str(WORKER_COMMAND).replace(chr(39), chr(34))}" in dockerfile
    for source in re.findall(r"^COPY (.+) \S+$", dockerfile, flags=re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"


def test_grafana_provisioning_points_at_the_shipped_dashboard() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(m.rsplit(":", 1)[0].split(":", 1) for m in grafana["volumes"] if "./" in m)
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "streamdp.yaml").read_text()
    )["providers"][0]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert (DEPLOY / "grafana" / "dashboards" / "streamdp.json").is_file()
    source = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    )["datasources"][0]
    dashboard = (DEPLOY / "grafana" / "dashboards" / "streamdp.json").read_text()
    assert f'"uid": "{source["uid"]}"' in dashboard
    assert source["url"] == "http://prometheus:9090"


def test_topics_follow_the_retention_and_partitioning_rules() -> None:
    table = topics()
    assert set(table) >= CONTRACT_TOPICS
    assert {"orders", "admissions"} <= set(table)
    changelogs = {n for n in table if n.startswith("streamdp-") and n.endswith("-changelog")}
    assert changelogs
    inputs = {"orders", "admissions"}
    for name in changelogs | {"streamdp.releases", "streamdp.consistent"}:
        assert table[name]["configs"]["cleanup.policy"] == "compact", name
    for name in inputs | {"streamdp.dead-letter"}:
        assert table[name]["data"] == "raw", name
        assert table[name]["configs"]["cleanup.policy"] == "delete", name
        assert int(table[name]["configs"]["retention.ms"]) > 0, name
    # raw partial sums are raw data too
    assert table["streamdp-state-changelog"]["data"] == "raw"
    # exactly the topics the daemon needs for the deployed spec, and Faust co-partitioning:
    # inputs, control and the state changelog share one partition count
    from streamdp.daemon.app import required_topics
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.engine import load_spec

    spec = load_spec(DEPLOY / "streamdp" / "streams.toml")
    n = table["streamdp-state-changelog"]["partitions"]
    needed = required_topics(
        spec, DaemonSettings(config=DEPLOY / "streamdp" / "streams.toml", partitions=n)
    )
    assert set(needed) <= set(table), set(needed) - set(table)
    copartitioned = inputs | changelogs | {"streamdp.control"}
    assert {table[t]["partitions"] for t in copartitioned} == {n}
    assert all(t["data"] in {"raw", "noisy", "control"} for t in table.values())


def test_statefulset_has_volumes_readiness_and_resources() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "streamdp.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget"} <= set(kinds)
    sts = kinds["StatefulSet"]["spec"]
    assert sts["replicas"] >= 2
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
    assert sts["serviceName"] == kinds["Service"]["metadata"]["name"]
    container = sts["template"]["spec"]["containers"][0]
    assert container["args"] == WORKER_COMMAND
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"web": 6066}
    assert container["readinessProbe"]["httpGet"] == {"path": "/status", "port": "web"}
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["limits"]["memory"]
    claim = sts["volumeClaimTemplates"][0]["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim] == "/var/lib/streamdp"
    assert mounts["spec"] == "/etc/streamdp"
    assert "streams.toml" in kinds["ConfigMap"]["data"]
    annotations = sts["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "6066"
    assert annotations["prometheus.io/path"] == "/metrics"
    readme = (DEPLOY / "k8s" / "README.md").read_text()
    for variable in (
        "STREAMDP_SECURITY_PROTOCOL",
        "STREAMDP_SASL_MECHANISM",
        "STREAMDP_SASL_USERNAME",
        "STREAMDP_SASL_PASSWORD",
    ):
        assert variable in readme


@pytest.mark.parametrize("guide", ["operating.md", "consuming.md"])
def test_guides_cover_the_topics(guide: str) -> None:
    text = (ROOT / "docs" / guide).read_text()
    for topic in ("streamdp.releases", "streamdp.consistent"):
        assert topic in text, f"{guide} does not mention {topic}"
    if guide == "operating.md":
        for topic in topics():
            assert f"`{topic}`" in text or "changelog" in topic, topic
        assert "streamdp replay --config" in text
        assert "streamdp-<table>-changelog" in text
