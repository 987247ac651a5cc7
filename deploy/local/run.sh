#!/usr/bin/env bash
# The run command. Today (issue #2 landed; the runtime is #3, the processors #4) it
# sets up, checks the envelope contract, starts a local Kafka when it can, applies
# the topic catalog to it, and sends one envelope of the expense-report flow through
# it and back, decoded. `hermesbus up` replaces this once the runtime exists.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source deploy/local/setup.sh

if ! report=$(hermesbus schemas check); then
  echo "$report"
  exit 1
fi
echo "schemas: every schema is compatible with its frozen versions"
hermesbus schemas fingerprint
hermesbus topics list

if [[ -n ${HERMES_KAFKA_BOOTSTRAP:-} ]]; then
  bootstrap=$HERMES_KAFKA_BOOTSTRAP
elif command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  export HERMES_KAFKA_RUN_DIR=${HERMES_KAFKA_RUN_DIR:-$ROOT/.hermes/kafka}
  line=$(bash deploy/local/kafka.sh start)
  bootstrap=${line#KAFKA_BOOTSTRAP=}
  trap 'bash deploy/local/kafka.sh stop >/dev/null 2>&1 || true' EXIT
  echo "kafka: Apache Kafka started at $bootstrap"
else
  echo "kafka: no HERMES_KAFKA_BOOTSTRAP and no java/mvn to start one;"
  echo "       the embedded broker (no Java) arrives with the runtime issue (#3)."
  exit 0
fi
hermesbus topics apply --bootstrap "$bootstrap"
python "$ROOT/deploy/local/hello.py" "$bootstrap"
