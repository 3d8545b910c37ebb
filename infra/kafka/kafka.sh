#!/usr/bin/env bash
# A local single-node Apache Kafka (KRaft, combined broker+controller) from the
# Maven Central jars. No Docker, no release tarball.
#
#   kafka.sh fetch    resolve the jars into infra/kafka/target/lib (Maven, cached in ~/.m2)
#   kafka.sh start    format storage on first use, start, wait until clients are accepted
#   kafka.sh stop     SIGTERM, wait for a clean shutdown (SIGKILL after a timeout)
#   kafka.sh status   exit 0 when running and accepting connections
#   kafka.sh kill     SIGKILL (fault-injection tests)
#
# Environment:
#   SRPO_KAFKA_DIR    data, logs and pid file (default <repo>/.srpo/kafka)
#   SRPO_KAFKA_PORT   client port (default 9092); the controller uses port+1
#   SRPO_KAFKA_HEAP   JVM heap (default 768m)
#   SRPO_KAFKA_EXTRA_PROPERTIES  a file appended to server.properties
#   SRPO_KAFKA_NODE_ID        node id (default 1)
#   SRPO_KAFKA_QUORUM_VOTERS  controller quorum, id@host:port,... (default this node alone);
#                             one voter per node of a cluster (infra/kafka/cluster.sh sets it)
#   SRPO_KAFKA_CLUSTER_ID     cluster id to format with (default random; nodes of one cluster share it)
#   SRPO_KAFKA_REPLICATION    replication of the internal topics (default 1; a cluster of 3: 3,
#                             with min.insync.replicas 2)
#   SRPO_KAFKA_SECURITY  plaintext (default) or sasl_ssl: clients must use TLS and
#                        SCRAM-SHA-512; needs SRPO_KAFKA_SSL_DIR (from make-certs.sh),
#                        SRPO_KAFKA_SCRAM_USER and SRPO_KAFKA_SCRAM_PASSWORD (the user
#                        is created when the storage is formatted). Brokers talk to
#                        each other on a plaintext loopback listener at port+2.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SRPO_KAFKA_DIR:-$REPO/.srpo/kafka}"
PORT="${SRPO_KAFKA_PORT:-9092}"
CONTROLLER_PORT="$((PORT + 1))"
HEAP="${SRPO_KAFKA_HEAP:-768m}"
LIB="$HERE/target/lib"
PIDFILE="$DIR/kafka.pid"
START_TIMEOUT="${SRPO_KAFKA_START_TIMEOUT:-60}"
NODE_ID="${SRPO_KAFKA_NODE_ID:-1}"
VOTERS="${SRPO_KAFKA_QUORUM_VOTERS:-$NODE_ID@127.0.0.1:$CONTROLLER_PORT}"
REPLICATION="${SRPO_KAFKA_REPLICATION:-1}"
MIN_ISR=$(( REPLICATION > 2 ? 2 : 1 ))

log() { echo "[kafka] $*" >&2; }

fetch() {
  if [[ -f "$LIB/.complete" ]]; then return; fi
  command -v mvn >/dev/null || { log "Maven (mvn) is required to fetch the Kafka jars"; exit 1; }
  log "resolving org.apache.kafka:kafka_2.13 from Maven Central"
  rm -rf "$LIB"
  mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIB" >&2
  touch "$LIB/.complete"
}

running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid; pid=$(cat "$PIDFILE")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

accepting() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

SECURITY="${SRPO_KAFKA_SECURITY:-plaintext}"

listener_properties() {
  case "$SECURITY" in
    plaintext)
      cat <<PROPS
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
PROPS
      ;;
    sasl_ssl)
      local ssl="${SRPO_KAFKA_SSL_DIR:?SRPO_KAFKA_SSL_DIR is required with SRPO_KAFKA_SECURITY=sasl_ssl}"
      cat <<PROPS
listeners=SASL_SSL://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,INTERNAL://127.0.0.1:$((PORT + 2))
advertised.listeners=SASL_SSL://127.0.0.1:$PORT,INTERNAL://127.0.0.1:$((PORT + 2))
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$ssl/broker.p12
ssl.keystore.password=$(cat "$ssl/password")
ssl.key.password=$(cat "$ssl/password")
ssl.client.auth=none
PROPS
      ;;
    *) log "unknown SRPO_KAFKA_SECURITY=$SECURITY (plaintext or sasl_ssl)"; exit 2 ;;
  esac
}

write_properties() {
  {
  cat <<PROPS
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$VOTERS
controller.listener.names=CONTROLLER
PROPS
  listener_properties
  cat <<PROPS
log.dirs=$DIR/data
num.partitions=3
offsets.topic.replication.factor=$REPLICATION
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$REPLICATION
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$REPLICATION
share.coordinator.state.topic.min.isr=$MIN_ISR
default.replication.factor=$REPLICATION
min.insync.replicas=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# History is kept for replay: topics set their own retention (see the topic catalog).
log.retention.hours=-1
transaction.max.timeout.ms=900000
message.max.bytes=4194304
PROPS
  } > "$DIR/server.properties"
  chmod 600 "$DIR/server.properties"
  if [[ -n "${SRPO_KAFKA_EXTRA_PROPERTIES:-}" ]]; then cat "$SRPO_KAFKA_EXTRA_PROPERTIES" >> "$DIR/server.properties"; fi
}

start() {
  if pid=$(running_pid); then
    log "already running (pid $pid) on 127.0.0.1:$PORT"; return 0
  fi
  command -v java >/dev/null || { log "Java 17+ is required"; exit 1; }
  fetch
  mkdir -p "$DIR/logs"
  write_properties
  local cp="$LIB/*"
  local jvm=(-Xms256m "-Xmx$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
             "-Dkafka.logs.dir=$DIR/logs" "-Dlog4j2.configurationFile=$HERE/log4j2.properties")
  if [[ ! -f "$DIR/data/meta.properties" ]]; then
    local cluster_id="${SRPO_KAFKA_CLUSTER_ID:--}"
    # A URL-safe base64 UUID, as kafka-storage random-uuid makes. It must not start with '-':
    # the storage tool would read it as an option and refuse to format (1 first run in 64).
    while [[ "$cluster_id" == -* ]]; do cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    log "formatting storage in $DIR/data (cluster $cluster_id)"
    local scram=()
    if [[ "$SECURITY" == sasl_ssl ]]; then
      scram=(--add-scram "SCRAM-SHA-512=[name=${SRPO_KAFKA_SCRAM_USER:?},password=${SRPO_KAFKA_SCRAM_PASSWORD:?}]")
    fi
    java "${jvm[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" -c "$DIR/server.properties" "${scram[@]}" > "$DIR/logs/format.log" 2>&1 \
      || { cat "$DIR/logs/format.log" >&2; exit 1; }
  fi
  log "starting on 127.0.0.1:$PORT"
  # setsid: the broker outlives this script and is not killed with its process group.
  setsid java "${jvm[@]}" -cp "$cp" kafka.Kafka "$DIR/server.properties" > "$DIR/logs/stdout.log" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  local waited=0
  while ! accepting; do
    if ! running_pid >/dev/null; then log "broker exited during start-up:"; tail -n 40 "$DIR/logs/stdout.log" >&2; tail -n 40 "$DIR/logs/server.log" >&2 || true; exit 1; fi
    if (( waited >= START_TIMEOUT * 10 )); then log "not accepting clients after ${START_TIMEOUT}s"; exit 1; fi
    sleep 0.1; waited=$((waited + 1))
  done
  log "accepting clients on 127.0.0.1:$PORT after $((waited / 10)).$((waited % 10))s (pid $(cat "$PIDFILE"))"
}

stop() {
  local pid
  if ! pid=$(running_pid); then log "not running"; rm -f "$PIDFILE"; return 0; fi
  log "stopping pid $pid"
  kill -TERM "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return 0; }; sleep 0.1; done
  log "no clean shutdown after 30s; killing"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

kill_hard() {
  local pid
  if pid=$(running_pid); then kill -KILL "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; rm -f "$PIDFILE"; log "killed $pid"; fi
}

status() {
  if pid=$(running_pid) && accepting; then echo "running pid=$pid port=$PORT dir=$DIR"; return 0; fi
  echo "stopped"; return 1
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  kill) kill_hard ;;
  status) status ;;
  reset) stop; rm -rf "$DIR/data"; log "data removed" ;;
  *) echo "usage: $0 fetch|start|stop|status|kill|reset" >&2; exit 2 ;;
esac
