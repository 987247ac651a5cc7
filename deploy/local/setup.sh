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
# The editable install is strict: setuptools lays the package out as installed in a link
# tree under build/ (processors/ appears as hermesbus/processors/), which mypy, IDEs and
# the interpreter all read the same way. The tree has one link per file, so a file added
# or removed since the last install means installing again (a second or two).
link_tree_stale() {
  "$VENV/bin/python" - "$ROOT" <<'PY'
import sys, tomllib
from pathlib import Path

root = Path(sys.argv[1])
config = tomllib.loads((root / "pyproject.toml").read_text())
version = config["project"]["version"]
tree = root / "build" / f"__editable__.hermesbus-{version}-py3-none-any" / "hermesbus"
mapped = config["tool"]["setuptools"]["package-dir"]
folders = {"hermesbus": tree} | {f: tree / n.split(".", 1)[1] for n, f in mapped.items()}
for folder, target in folders.items():
    for path in (root / folder).rglob("*"):
        if path.suffix in {".py", ".avsc", ".yaml", ".json"} and "__pycache__" not in path.parts:
            if not (target / path.relative_to(root / folder)).exists():
                sys.exit(0)  # stale: a file has no link
for link in tree.rglob("*"):
    if link.is_symlink() and not link.exists():
        sys.exit(0)  # stale: a linked file is gone
sys.exit(1)
PY
}
if [[ ! -f $stamp || $ROOT/pyproject.toml -nt $stamp ]] || link_tree_stale; then
  echo "setup: installing hermesbus and its dev tools into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  # setuptools warns not to remove the link tree: the lines above say why it is there
  PYTHONWARNINGS="ignore:Editable installation" \
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --config-settings editable_mode=strict -e "$ROOT[dev]"
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
