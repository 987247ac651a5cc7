#!/usr/bin/env bash
# The run command: set up, check the envelope contract, then `hermesbus up --demo`:
# the embedded broker (no Java, no servers), the topics, the four processors with the
# demo tools, both expense-report conversations (processors/tool/demo/README.md) with
# their replies and trace waterfalls, and serving until Ctrl-C.
#
#   deploy/local/run.sh [hermesbus up options, e.g. --once or --bootstrap HOST:PORT]
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source deploy/local/setup.sh

if ! report=$(hermesbus schemas check); then
  echo "$report"
  exit 1
fi
echo "schemas: every schema is compatible with its frozen versions"
exec hermesbus up --demo "$@"
