"""deploy/local/setup.sh installs hermesbus without setuptools' editable-install warning
block (it said a folder named like the package may shadow it: here it is the package)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_editable_install_prints_no_warning_block(tmp_path: Path) -> None:
    setup = (ROOT / "deploy/local/setup.sh").read_text()
    found = re.search(
        r'PYTHONWARNINGS="([^"]+)"\s*\\\n\s*"\$VENV/bin/python" -m pip install', setup
    )
    assert found, "setup.sh no longer sets PYTHONWARNINGS on its pip install"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PYTHONWARNINGS": found.group(1)}
    done = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--no-deps", "-e", str(ROOT)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully installed hermesbus" in done.stdout
    said = done.stdout + done.stderr
    assert "Warning" not in said and "!!" not in said, said
