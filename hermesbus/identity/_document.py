"""The JSON document a keyring or a public keys file is: ``{"version": 1, "keys": {...}}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermesbus.errors import ConfigError

__all__ = ["read_document"]


def read_document(path: Path, name: str) -> dict[str, Any]:
    """The document at ``path``, its ``keys`` a mapping; ConfigError naming the file
    (``name``: "keyring", "public keys file") and what is wrong with it."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the {name} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"the {name} {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
        raise ConfigError(f'the {name} {path} must be {{"version": 1, "keys": {{...}}}}')
    return data
