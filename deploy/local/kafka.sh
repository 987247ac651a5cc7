#!/usr/bin/env bash
# Run a real single-node Apache Kafka 4.x broker (KRaft, combined broker+controller)
# on the loopback interface, for tests. The broker's jars come from Maven Central
# through plain `mvn` (deploy/local/kafka/pom.xml) and are cached; no Docker, no
# other downloads.
#
#   deploy/local/kafka.sh fetch          collect the jars into the cache (once)
#   deploy/local/kafka.sh start [PORT]   start a broker; prints KAFKA_BOOTSTRAP=127.0.0.1:PORT
#   deploy/local/kafka.sh stop [--keep-logs]  stop it, delete its data (and logs, unless kept)
#   deploy/local/kafka.sh status         exit 0 and print the bootstrap if running, else exit 3
#
# See deploy/local/README.md for the environment variables.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
POM="$SCRIPT_DIR/kafka/pom.xml"
LOG_NAME=kafka.sh SERVICE=Kafka STOP_FLAGS=--keep-logs
USAGE="fetch | start [PORT] | stop [--keep-logs] | status"
# shellcheck source=deploy/local/lib.sh
source "$SCRIPT_DIR/lib.sh"

# The Kafka version lives in one place, the pom's <kafka.version>; it can be
# overridden per run with HERMES_KAFKA_VERSION (passed to mvn as -Dkafka.version).
pom_version=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$POM" | head -n 1)
KAFKA_VERSION=${HERMES_KAFKA_VERSION:-$pom_version}
if [[ ! $KAFKA_VERSION =~ ^[0-9A-Za-z._-]+$ ]]; then
  log "bad Kafka version '$KAFKA_VERSION'"
  exit 2
fi
CACHE_DIR=${HERMES_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesbus/kafka-$KAFKA_VERSION}
LIB_DIR="$CACHE_DIR/lib"
RUN_DIR=${HERMES_KAFKA_RUN_DIR:-/tmp/hermesbus-kafka}
run_files kafka # kafka.pid, kafka.dir; its data folders carry .hermesbus-kafka
PID_PATTERN='kafka\.Kafka' # a recycled pid is not our broker
BOOT_FILE="$RUN_DIR/kafka.bootstrap"
START_TIMEOUT=${HERMES_KAFKA_START_TIMEOUT:-90}
HEAP=${HERMES_KAFKA_HEAP:-512m}
JAVA=${JAVA:-java}

check_uint HERMES_KAFKA_START_TIMEOUT "$START_TIMEOUT"
check_heap HERMES_KAFKA_HEAP "$HEAP"

# ---------------------------------------------------------------- fetch

# The lib dir is complete when its marker holds this key: the version plus a
# hash of the pom, so editing the pom (e.g. the log4j version) re-fetches.
cache_key() {
  printf '%s %s\n' "$KAFKA_VERSION" "$(sha256sum "$POM" | cut -d' ' -f1)"
}

lib_complete() {
  [[ -f $LIB_DIR/.complete ]] && [[ $(cat "$LIB_DIR/.complete") == "$(cache_key)" ]]
}

do_fetch() {
  lib_complete && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka $KAFKA_VERSION)"
  mkdir -p "$CACHE_DIR"
  lock_cache "$CACHE_DIR/.lock"
  if lib_complete; then unlock_cache; return 0; fi
  log "fetching Kafka $KAFKA_VERSION jars with mvn into $LIB_DIR"
  local tmp="$CACHE_DIR/lib.tmp.$$"
  rm -rf -- "$tmp"
  if ! mvn_quiet -f "$POM" "-Dkafka.version=$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime "-DoutputDirectory=$tmp"; then
    rm -rf -- "$tmp"
    die "mvn failed to fetch Kafka $KAFKA_VERSION"
  fi
  compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || { rm -rf -- "$tmp"; die "no kafka_2.13 jar was fetched"; }
  cache_key >"$tmp/.complete"
  rm -rf -- "$LIB_DIR"
  mv -- "$tmp" "$LIB_DIR"
  unlock_cache
  log "cached $(find "$LIB_DIR" -name '*.jar' | wc -l) jars in $LIB_DIR"
}

cmd_fetch() {
  do_fetch
  echo "KAFKA_LIB=$LIB_DIR"
}

# ---------------------------------------------------------------- readiness

# ---------------------------------------------------------------- start

cmd_start() {
  local port=${1:-${HERMES_KAFKA_PORT:-}}
  [[ -z $port ]] || check_port PORT "$port"
  mkdir -p "$RUN_DIR"

  local pid
  if pid=$(running_pid); then
    local boot
    boot=$(cat "$BOOT_FILE" 2>/dev/null || true)
    if [[ -z $port || $boot == "127.0.0.1:$port" ]]; then
      log "already running (pid $pid), reusing it"
      echo "KAFKA_BOOTSTRAP=$boot"
      return 0
    fi
    die "a broker is already running at $boot (pid $pid); run '$0 stop' first"
  fi
  clean_state "$BOOT_FILE" # the leftovers of a broker that died

  command -v "$JAVA" >/dev/null || die "java not found (Kafka $KAFKA_VERSION needs Java 17+)"
  do_fetch

  [[ -n $port ]] || port=$(free_port)
  local cport dir
  cport=$(free_port "$port")
  dir=$(data_dir_new "${TMPDIR:-/tmp}" hermesbus-kafka-data)
  mkdir -p "$dir/data" "$dir/logs"

  cat >"$dir/server.properties" <<EOF
# Written by deploy/local/kafka.sh: single node, KRaft, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
# Topics exist only when created on purpose (hermesbus topics apply, or a test's
# own admin call): a typo in a topic name must fail, not create a topic.
auto.create.topics.enable=false
# Internal topics: one replica, and few partitions so the first group join and
# the first transaction are quick.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF

  kafka_log4j "$dir" hermesbus-kafka

  local cp="$LIB_DIR/*"
  local -a jvm=(
    "-Xmx$HEAP"
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$dir/log4j2.properties"
    -cp "$cp"
  )
  # A cluster id is 16 random bytes in URL-safe base64. One in 64 of those
  # begins with "-", which the tool's argument parser takes for an option
  # ("--cluster-id: expected one argument"): draw again until it does not,
  # as Kafka's own random-uuid does, and pass it as --cluster-id=... besides.
  local cluster_id
  cluster_id=$(python3 -c '
import base64, os
while True:
    text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not text.startswith("-"):
        print(text)
        break
')

  log "formatting KRaft storage in $dir/data"
  if ! "$JAVA" "${jvm[@]}" kafka.tools.StorageTool format \
      "--cluster-id=$cluster_id" -c "$dir/server.properties" >"$dir/logs/format.out" 2>&1; then
    cat "$dir/logs/format.out" >&2
    die "storage format failed (data dir kept: $dir)"
  fi

  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller 127.0.0.1:$cport, dir $dir)"
  # setsid: the broker outlives this script and is not hit by the caller's Ctrl-C.
  # The inner shell writes its own pid (= the JVM's, after exec) to the pid file.
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' kafka-launch "$PID_FILE" \
    "$JAVA" "${jvm[@]}" kafka.Kafka "$dir/server.properties" \
    >"$dir/logs/stdout.log" 2>&1 </dev/null &
  echo "127.0.0.1:$port" >"$BOOT_FILE"
  wait_ready "$START_TIMEOUT" broker_ready "$dir" "$port" || start_failed "$dir"
  log "ready after ${SECONDS}s"
  echo "KAFKA_BOOTSTRAP=127.0.0.1:$port"
}

broker_ready() { # dir port: it logged its start and answers on its port
  grep -q 'Kafka Server started' "$1/logs/server.log" 2>/dev/null && probe_kafka "$2"
}

start_failed() { # dir
  local dir=$1
  log "last lines of $dir/logs:"
  tail -n 40 "$dir/logs/server.log" >&2 2>/dev/null || true
  tail -n 20 "$dir/logs/stdout.log" >&2 2>/dev/null || true
  stop_service 30 || true
  rm -f -- "$PID_FILE" "$BOOT_FILE"
  log "data/log dir kept for inspection: $dir ('$0 stop' removes it)"
  exit 1
}

# ---------------------------------------------------------------- stop and status

keep_logs() { # after a failed test run: the broker's logs (and its config) stay, its data goes
  local dir
  dir=$(data_dir) || return 0
  rm -rf -- "$dir/data" "${dir:?}/$MARKER"
  log "logs kept: $dir/logs"
}

cmd_stop() { # [--keep-logs]
  stop_service 30 || true
  if has_flag --keep-logs "$@"; then keep_logs; fi
  clean_state "$BOOT_FILE"
}

cmd_status() {
  report_status "KAFKA_BOOTSTRAP=$(cat "$BOOT_FILE" 2>/dev/null) dir=$(cat "$DIR_FILE" 2>/dev/null)"
}

main "$@"
