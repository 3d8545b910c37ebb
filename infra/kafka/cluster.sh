#!/usr/bin/env bash
# A local three-broker Apache Kafka cluster (KRaft; every node a broker and a controller voter)
# on loopback, from the same Maven Central jars as kafka.sh, which runs each node. Internal topics
# are replicated 3 ways with min.insync.replicas 2, as are topics created without a factor.
#
#   cluster.sh start            format on first use, start the three nodes, wait for them all
#   cluster.sh stop             stop every node (SIGTERM, clean shutdown)
#   cluster.sh status           exit 0 when every node accepts clients
#   cluster.sh brokers          print the bootstrap list (127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3)
#   cluster.sh reset            stop, remove the data
#   cluster.sh start N | stop N | kill N     one node (1-3): start, SIGTERM, SIGKILL
#   cluster.sh pause N | resume N            SIGSTOP / SIGCONT one node (a stalled broker)
#   cluster.sh pid N                         the node's JVM pid
#
# Environment:
#   SRPO_KAFKA_CLUSTER_DIR   data, logs and pid files (default <repo>/.srpo/kafka-cluster)
#   SRPO_KAFKA_CLUSTER_PORT  client port of node 1 (default 9192); node N listens on
#                            PORT + 10 (N - 1), its controller on that + 1
#   SRPO_KAFKA_HEAP          JVM heap per node (default 512m)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SRPO_KAFKA_CLUSTER_DIR:-$REPO/.srpo/kafka-cluster}"
BASE="${SRPO_KAFKA_CLUSTER_PORT:-9192}"
NODES=(1 2 3)

log() { echo "[kafka-cluster] $*" >&2; }
port_of() { echo $((BASE + 10 * ($1 - 1))); }

voters() {
  local out=() n
  for n in "${NODES[@]}"; do out+=("$n@127.0.0.1:$(($(port_of "$n") + 1))"); done
  (IFS=,; echo "${out[*]}")
}

brokers() {
  local out=() n
  for n in "${NODES[@]}"; do out+=("127.0.0.1:$(port_of "$n")"); done
  (IFS=,; echo "${out[*]}")
}

cluster_id() {
  mkdir -p "$DIR"
  if [[ ! -f "$DIR/cluster-id" ]]; then
    local id="-"
    while [[ "$id" == -* ]]; do id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    echo "$id" > "$DIR/cluster-id"
  fi
  cat "$DIR/cluster-id"
}

node() {
  local n="$1" verb="$2"
  [[ "$n" =~ ^[123]$ ]] || { log "node must be 1, 2 or 3, got $n"; exit 2; }
  SRPO_KAFKA_DIR="$DIR/node$n" SRPO_KAFKA_PORT="$(port_of "$n")" SRPO_KAFKA_NODE_ID="$n" \
    SRPO_KAFKA_QUORUM_VOTERS="$(voters)" SRPO_KAFKA_CLUSTER_ID="$(cluster_id)" SRPO_KAFKA_REPLICATION=3 \
    SRPO_KAFKA_HEAP="${SRPO_KAFKA_HEAP:-512m}" bash "$HERE/kafka.sh" "$verb"
}

pid_of() {
  local f="$DIR/node$1/kafka.pid"
  [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
}

start_all() {
  bash "$HERE/kafka.sh" fetch
  cluster_id > /dev/null # made once, before the nodes format in parallel
  # Together: a node's controller needs a majority of the voters before the quorum has a leader.
  local pids=() n failed=0
  for n in "${NODES[@]}"; do node "$n" start & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  (( failed == 0 )) || { log "a node did not start"; exit 1; }
  log "running: $(brokers)"
}

case "${1:-}" in
  start) if [[ -n "${2:-}" ]]; then node "$2" start; else start_all; fi ;;
  # Together: a node stopped last would wait for a quorum that is gone before it shuts down cleanly.
  stop) if [[ -n "${2:-}" ]]; then node "$2" stop; else for n in "${NODES[@]}"; do node "$n" stop & done; wait; fi ;;
  kill) node "${2:?kill needs a node}" kill ;;
  pause) kill -STOP "$(pid_of "${2:?pause needs a node}")"; log "node $2 paused" ;;
  resume) kill -CONT "$(pid_of "${2:?resume needs a node}")"; log "node $2 resumed" ;;
  pid) pid_of "${2:?pid needs a node}" ;;
  status) for n in "${NODES[@]}"; do node "$n" status || exit 1; done ;;
  brokers) brokers ;;
  reset) for n in "${NODES[@]}"; do node "$n" stop & done; wait; rm -rf "$DIR"; log "data removed" ;;
  *) echo "usage: $0 start|stop|status|brokers|reset|start N|stop N|kill N|pause N|resume N|pid N" >&2; exit 2 ;;
esac
