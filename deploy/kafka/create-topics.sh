#!/usr/bin/env bash
# Create (or bring up to date) every topic listed in topics.conf. Idempotent: run it on every
# deployment. Needs the Kafka CLI (the apache/kafka image has it in /opt/kafka/bin).
#   BOOTSTRAP       bootstrap servers, e.g. kafka-1:9092
#   COMMAND_CONFIG  optional client properties file (SASL/SSL) for a secured cluster
#   TOPICS_FILE     defaults to topics.conf next to this script
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bootstrap="${BOOTSTRAP:?set BOOTSTRAP to the Kafka bootstrap servers}"
topics_file="${TOPICS_FILE:-$here/topics.conf}"
bin="${KAFKA_BIN:-/opt/kafka/bin}"
extra=()
if [ -n "${COMMAND_CONFIG:-}" ]; then
  extra=(--command-config "$COMMAND_CONFIG")
fi

for attempt in $(seq 1 60); do
  if "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" "${extra[@]}" --list >/dev/null 2>&1; then
    break
  fi
  echo "waiting for Kafka at $bootstrap (attempt $attempt)" >&2
  sleep 2
done

while read -r name partitions replication data configs; do
  case "$name" in ''|'#'*) continue ;; esac
  echo "topic $name: $partitions partitions, replication $replication, $data data" >&2
  config_args=()
  IFS=',' read -r -a pairs <<< "$configs"
  for pair in "${pairs[@]}"; do
    config_args+=(--config "$pair")
  done
  "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" "${extra[@]}" --create --if-not-exists \
    --topic "$name" --partitions "$partitions" --replication-factor "$replication" \
    "${config_args[@]}"
  # Existing topics: enforce the configs (partitions can only grow; never shrink them).
  "$bin/kafka-configs.sh" --bootstrap-server "$bootstrap" "${extra[@]}" --alter \
    --entity-type topics --entity-name "$name" --add-config "$configs" >/dev/null
done < "$topics_file"
echo "all streamdp topics are in place" >&2
