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

# Tests wait on brokers far more than they compute: they run in WORKERS pytest workers
# (pytest-xdist; a test file stays on one worker), each with its own set of services
# (deploy/local/services.sh), so no test shares a broker or a server with one running
# at the same time. HERMES_TEST_WORKERS=1 runs them in one process, as before.
WORKERS=${HERMES_TEST_WORKERS:-2}
if ! [[ $WORKERS =~ ^[1-9][0-9]*$ ]]; then
  echo "test.sh: HERMES_TEST_WORKERS must be a whole number of workers (1 or more), not '$WORKERS'" >&2
  exit 2
fi
RUN_DIR=$(mktemp -d -t hermesbus-test.XXXXXX)
SETS=()
for ((i = 0; i < WORKERS; i++)); do SETS+=("$RUN_DIR/gw$i"); done
stop_services() { # exit status: the run folder (the services' logs) is kept unless it is 0
  local status=$1 keep=() set pids=()
  ((status == 0)) || keep=(--keep-logs)
  for set in "${SETS[@]}"; do
    [[ -d $set ]] || continue
    bash deploy/local/services.sh stop "$set" ${keep[@]+"${keep[@]}"} &
    pids+=($!)
  done
  for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" || true; done
  if ((status == 0)); then
    rm -rf "$RUN_DIR"
  else
    evidence "$status" "${SETS[@]}"
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
# One set per worker, started side by side; each says what started where.
starters=()
for set in "${SETS[@]}"; do
  mkdir -p "$set"
  bash deploy/local/services.sh start "$set" >"$set.said" 2>&1 &
  starters+=($!)
done
for ((i = 0; i < WORKERS; i++)); do
  wait "${starters[$i]}" || true
  ((WORKERS == 1)) || echo "-- worker gw$i's services"
  cat "${SETS[$i]}.said"
  # the first set under the plain names (a run without workers uses it); every set under
  # its worker's suffix, which tests/conftest.py maps back to the plain names
  # shellcheck disable=SC1090
  ((i > 0)) || source "${SETS[$i]}/env"
  while IFS= read -r line; do
    name=${line#export }
    eval "export ${name%%=*}__GW$i=${name#*=}"
  done <"${SETS[$i]}/env"
done

say "tests"
set +e
if ((WORKERS > 1)); then
  pytest -n "$WORKERS" --dist loadfile "$@"
else
  pytest "$@"
fi
status=$?
set -e
exit $status
