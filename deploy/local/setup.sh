#!/usr/bin/env bash
# Sourced by run.sh and test.sh: make .venv (Python >= 3.11) and install hermesbus into it.
# Installs only from PyPI; re-running is quick when nothing changed.
set -euo pipefail

ROOT=${ROOT:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)}
VENV=${HERMES_VENV:-$ROOT/.venv}

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [[ -n $candidate ]] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "setup: hermesbus needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [[ ! -x $VENV/bin/python ]]; then
  python=$(find_python)
  echo "setup: creating $VENV with $python" >&2
  "$python" -m venv "$VENV"
fi
stamp="$VENV/.hermesbus-installed"
if [[ ! -f $stamp || $ROOT/pyproject.toml -nt $stamp ]]; then
  echo "setup: installing hermesbus and its dev tools into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  # setuptools' editable finder warns that a folder named like the package in the working
  # directory may take precedence on import: here that folder IS the package (package-dir
  # maps hermesbus to hermesbus/), so the block it prints on every first run says nothing
  PYTHONWARNINGS="ignore:Editable installation" \
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[dev]"
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
