"""deploy/: the compose topology, topics, worker image and Kubernetes manifests are coherent.

What this proves: compose.yaml parses and references only images (pinned), files, services,
volumes and variables that exist; Kafka runs in KRaft mode with enough nodes for the topics'
replication; two or more workers run the contract command with the spec mounted, with settings
the worker accepts (web server on all addresses inside the container, Faust's raw /table view
off, the partition count of topics.conf); Prometheus scrapes exactly the worker services on 6066
and loads the shipped rules; Grafana's provisioning points at the shipped dashboards;
topics.conf holds exactly what the daemon needs and follows the retention/compaction and
co-partitioning rules; the StatefulSet runs the shipped spec with /status readiness and
resources; the guides mention every topic, carry the replay command, document every STREAMDP_*
variable and worker flag that exists and name none that does not, and keep no draft markers.
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamdp import cli
from streamdp.daemon import settings as settings_module
from streamdp.daemon.settings import DaemonSettings, env_settings

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


def k8s_docs() -> dict[str, dict[str, Any]]:
    return {
        d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "k8s" / "streamdp.yaml").read_text())
    }


def option_strings(command: str) -> set[str]:
    """Every option the argparse parser of ``streamdp <command>`` accepts."""
    parser = argparse.ArgumentParser()
    cli._load(command).register(parser)
    return {o for action in parser._actions for o in action.option_strings}


def compose_defaults(env: dict[str, str]) -> dict[str, str]:
    """``env`` as compose hands it to the container when the operator sets none of the
    variables it names: each ``${NAME:-default}`` becomes its default."""
    return {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", v) for k, v in env.items()}


def settings_from_env(env: dict[str, str]) -> DaemonSettings:
    """The settings a worker builds from these environment variables (compose's defaults
    filled in) and the deployed spec."""
    values = env_settings(str(DEPLOY / "streamdp" / "streams.toml"), compose_defaults(env))
    return DaemonSettings(**values).validate()  # type: ignore[arg-type]


def variables_read() -> set[str]:
    """STREAMDP_* names the settings module reads from the environment."""
    return set(re.findall(r"STREAMDP_[A-Z_]+[A-Z]", inspect.getsource(env_settings)))


def deploy_and_doc_texts() -> dict[str, str]:
    paths = [*(ROOT / "docs").glob("*.md"), *(p for p in DEPLOY.rglob("*") if p.is_file())]
    return {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in paths}


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
    partitions = topics()["streamdp-state-changelog"]["partitions"]
    for name, service in workers.items():
        assert service["command"] == WORKER_COMMAND, name
        assert "./streamdp/streams.toml:/etc/streamdp/streams.toml:ro" in service["volumes"]
        env = {k: str(v) for k, v in service["environment"].items()}
        assert {h.split(":")[0] for h in env["STREAMDP_BOOTSTRAP"].split(",")} == brokers
        # what the worker itself makes of this environment (defaults filled in)
        settings = settings_from_env(env)
        assert settings.web_host == "0.0.0.0", f"{name}: /metrics unreachable from Prometheus"
        assert settings.web_port == 6066
        assert settings.partitions == partitions
        assert settings.insecure_seed is None
        assert f"{settings.app_id}-state-changelog" in topics()
        # Faust's /table/<name>/<key>/ view would serve the raw state table on the same port
        assert env["APP_WEB_TABLES_ENABLED"] == "false", name
        assert env["APP_WEB_ROUTER_ENABLED"] == "false", name
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
    assert re.search(r"^(RUN|    &&) pip install \.", dockerfile, flags=re.M)
    # the image is built with the native order scanner, and the build fails without it
    assert 'python -c "import streamdp.engine._order_scanner"' in dockerfile
    assert re.search(r"^COPY .*\bsetup\.py\b", dockerfile, flags=re.M)
    for setting in ("STREAMDP_WEB_HOST=0.0.0.0", "APP_WEB_TABLES_ENABLED=false"):
        assert setting in dockerfile, setting
    assert f"CMD {str(WORKER_COMMAND).replace(chr(39), chr(34))}" in dockerfile
    ignored = _dockerignore(DEPLOY / "Dockerfile.dockerignore")
    for source in re.findall(r"^COPY (.+) \S+$", dockerfile, flags=re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"
            # BuildKit applies <Dockerfile>.dockerignore: a copied file it leaves out of the
            # build context fails the build ("/setup.py": not found)
            assert not ignored(path.rstrip("/")), f"Dockerfile.dockerignore leaves out {path}"


def _dockerignore(path: Path) -> Callable[[str], bool]:
    """Whether a context path is excluded by ``path``'s patterns: the last pattern matching
    it (or a directory above it) decides, ``!`` re-including (Docker's rule)."""
    patterns = [
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def excluded(name: str) -> bool:
        parts = name.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        verdict = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            body = pattern.lstrip("!").rstrip("/")
            if any(fnmatch.fnmatchcase(prefix, body) for prefix in prefixes):
                verdict = not negate
        return verdict

    return excluded


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
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.daemon.topology import required_topics
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


def test_statefulset_runs_the_spec_with_readiness_and_resources() -> None:
    kinds = k8s_docs()
    assert {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"} <= set(
        kinds
    )
    sts = kinds["StatefulSet"]["spec"]
    assert sts["replicas"] >= 2
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
    assert sts["serviceName"] == kinds["Service"]["metadata"]["name"]
    container = sts["template"]["spec"]["containers"][0]
    assert container["args"] == WORKER_COMMAND
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"web": 6066}
    assert container["readinessProbe"]["httpGet"] == {"path": "/status", "port": "web"}
    # the "restricted" Pod Security Standard, which a namespace may enforce: non-root, no
    # privilege escalation, every capability dropped, the runtime's seccomp profile
    pod = sts["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # the worker calls no Kubernetes API: no token for whoever reaches the pod
    assert pod["automountServiceAccountToken"] is False
    assert container["resources"]["requests"]["cpu"]
    # the operator port admits Prometheus alone: the policy selects the worker pods, isolates
    # their ingress, and its one rule names one port and one peer (namespace AND pod labels)
    policy = kinds["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == sts["template"]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "web", "protocol": "TCP"}]
    (peer,) = rule["from"]
    assert set(peer) == {"namespaceSelector", "podSelector"}
    assert container["resources"]["limits"]["memory"]
    # the state table lives in memory and is restored from the changelog: the data directory
    # is scratch, and a persistent volume would only suggest a durability that is not there
    assert "volumeClaimTemplates" not in sts
    volumes = {v["name"]: v for v in sts["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["data"] == "/var/lib/streamdp"
    assert "emptyDir" in volumes["data"]
    assert mounts["spec"] == "/etc/streamdp"
    assert volumes["spec"]["configMap"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    shipped = (DEPLOY / "streamdp" / "streams.toml").read_text()
    assert kinds["ConfigMap"]["data"]["streams.toml"] == shipped
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = settings_from_env(env)
    assert settings.web_host == "0.0.0.0"
    assert settings.web_port == ports["web"]
    assert settings.partitions == topics()["streamdp-state-changelog"]["partitions"]
    assert env["APP_WEB_TABLES_ENABLED"] == "false"
    assert env["APP_WEB_ROUTER_ENABLED"] == "false"
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
    for protocol in settings_module.SECURITY_PROTOCOLS:
        assert f"`{protocol}`" in readme, protocol
    for mechanism in settings_module.SASL_MECHANISMS:
        assert f"`{mechanism}`" in readme, mechanism


@pytest.mark.parametrize("guide", ["operating.md", "consuming.md", "architecture.md"])
def test_guides_cover_the_topics(guide: str) -> None:
    text = (ROOT / "docs" / guide).read_text()
    for topic in ("streamdp.releases", "streamdp.consistent"):
        assert topic in text, f"{guide} does not mention {topic}"
    if guide == "operating.md":
        for topic in topics():
            assert f"`{topic}`" in text, topic
        assert "streamdp replay --config SPEC --input events.jsonl --output-dir DIR" in text
        from streamdp.engine.events import REASONS

        for reason in REASONS:
            assert f"`{reason}`" in text, reason


def test_no_draft_markers_left() -> None:
    for name, text in deploy_and_doc_texts().items():
        assert "[daemon" not in text, name
        assert "not yet written" not in text, name


def test_every_streamdp_variable_named_is_one_the_worker_reads() -> None:
    read = variables_read()
    assert {"STREAMDP_BOOTSTRAP", "STREAMDP_WEB_HOST", "STREAMDP_SASL_PASSWORD"} <= read
    for variable in sorted(read):
        # each name the source mentions really changes the settings (not a dead string)
        base = {"STREAMDP_CONFIG": "base.toml"}
        assert env_settings(None, {**base, variable: "1"}) != env_settings(None, base), variable
    for name, text in deploy_and_doc_texts().items():
        for variable in set(re.findall(r"STREAMDP_[A-Z_]+[A-Z]", text)):
            assert variable in read, f"{name} names {variable}, which the worker never reads"
    # and the operator guide documents every one of them
    guide = (ROOT / "docs" / "operating.md").read_text()
    for variable in read:
        assert f"`{variable}`" in guide, f"docs/operating.md does not document {variable}"


def test_every_flag_named_exists() -> None:
    worker = option_strings("worker")
    commands = {name: option_strings(name) for name in cli.COMMANDS}
    span = re.compile(r"`([^`\n]+)`")
    for name, text in deploy_and_doc_texts().items():
        snippets = span.findall(text) + text.splitlines()
        for snippet in snippets:
            # `streamdp <command> --flag ...` (inline or in a code block)
            for command, rest in re.findall(r"streamdp (\w+)((?: +[^ `|]+)*)", snippet):
                if command not in commands:
                    continue
                for flag in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", rest):
                    assert flag in commands[command], f"{name}: streamdp {command} {flag}"
        # a bare `--flag ...` span is a worker flag by the guides' convention
        for snippet in span.findall(text):
            if snippet.startswith("--"):
                assert snippet.split()[0] in worker, f"{name}: {snippet}"
    # the command lines of the deployments
    for service in services_with("worker-").values():
        assert set(re.findall(r"--[a-z-]+", " ".join(service["command"]))) <= worker
    args = k8s_docs()["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert set(re.findall(r"--[a-z-]+", " ".join(args))) <= worker
    # and the operator guide documents every worker flag
    guide = (ROOT / "docs" / "operating.md").read_text()
    for flag in worker - {"-h", "--help"}:
        assert f"`{flag}" in guide, f"docs/operating.md does not document {flag}"


def test_the_commented_unit_key_blocks_uncomment_into_a_mounted_secret() -> None:
    """deploy/k8s/README.md tells an operator with a privacy unit to uncomment the key's
    variable, volume and mount: so uncommented, they parse and fit together (the file the
    variable names is in the mounted secret, readable by the pod's group only)."""
    text = (DEPLOY / "k8s" / "streamdp.yaml").read_text()
    marked = re.compile(
        r"^(\s*)# (- name: STREAMDP_UNIT_KEY_FILE|  value: /etc/streamdp-unit"
        r"|- \{name: unit-key|- name: unit-key |  secret: \{secretName)",
        re.M,
    )
    assert len(marked.findall(text)) == 5
    docs = yaml.safe_load_all(marked.sub(r"\1\2", text))
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    (variable,) = [e for e in container["env"] if e["name"] == "STREAMDP_UNIT_KEY_FILE"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "unit-key"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "unit-key"]
    assert variable["value"] == mount["mountPath"] + "/unit.key"
    assert mount["readOnly"] is True
    assert volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    assert "STREAMDP_UNIT_KEY_FILE" in variables_read()
