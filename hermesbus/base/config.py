"""Settings read from ``HERMES_*`` environment variables (frozen pydantic-settings models)."""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import platformdirs
from pydantic import AfterValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.errors import SettingError

__all__ = [
    "HOME_ENV",
    "HermesSettings",
    "StateHome",
    "default_home",
    "is_loopback",
    "unwritable_home",
    "why_unwritable",
    "without_userinfo",
    "writable_home",
]

HOME_ENV = "HERMES_HOME"
"""The variable that names the state folder; unset, the per-user data folder is used."""


def default_home() -> Path:
    """The per-user data folder (``~/.local/share/hermesbus`` on Linux), used without
    ``HERMES_HOME``: state never depends on the folder a command runs in."""
    return Path(platformdirs.user_data_dir("hermesbus", appauthor=False))


def _absolute(home: Path) -> Path:
    home = home.expanduser().absolute()
    if home.exists() and not home.is_dir():
        raise ValueError(f"{home} is a file, not a folder: point {HOME_ENV} at a folder")
    return home


StateHome = Annotated[Path, AfterValidator(_absolute)]
"""The type of every settings model's ``home`` (with ``Field(default_factory=default_home)``):
absolute, so a relative ``HERMES_HOME`` means the same folder to every part of a process."""


class HermesSettings(BaseSettings):
    """Process-wide settings; secrets are ``SecretStr`` and never printed."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: StateHome = Field(default_factory=default_home)
    """The state folder: ``HERMES_HOME``, else :func:`default_home`. The settings of the
    stores (tool, memory, SQLite state) read the same variable with the same type and
    default; nothing else works out where state lives."""
    topic_prefix: str = ""
    """Put in front of every topic name (one per tenant or environment)."""
    schema_registry_url: str | None = None
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    schema_registry_timeout_s: float = 10.0
    kibana_url: str | None = None
    """``trace`` and ``session`` print a Discover link into this Kibana when it is set."""
    kibana_api_key: SecretStr | None = None
    """For ``kibana import``, if Kibana needs one (only from the environment)."""
    mcp_serve_token: SecretStr | None = None
    """``HERMES_MCP_SERVE_TOKEN``: the bearer token ``mcp serve --port`` asks every HTTP
    request for (it does not serve HTTP without one); only from the environment."""


def writable_home(home: Path) -> Path:
    """The state folder ``home``, created if needed, once a file was written in it; else
    the SettingError every command says it with."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home, prefix=".probe-"):
            pass  # the only way to know a folder is writable is to write in it
    except OSError as exc:
        raise unwritable_home(home, exc) from exc
    return home


def unwritable_home(home: Path, exc: OSError) -> SettingError:
    """``state HOME is not writable: WHY; fix: set HERMES_HOME ...``: how every command (and
    ``doctor``) says that the state folder cannot be made or written."""
    return SettingError(
        f"state {home} is not writable: {why_unwritable(home, exc)}; fix: set {HOME_ENV} "
        "to a folder you can write"
    )


def why_unwritable(folder: Path, exc: OSError) -> str:
    """Why ``folder`` could not be made or written: the file it would be under, else the
    system's reason (``Permission denied``)."""
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                return f"{above} is a file, not a folder"
            break
    return exc.strerror or type(exc).__name__


_SECRET_WORDS = ("pass", "secret", "token", "credential", "auth")
"""A query parameter whose name holds one of these is a secret (redis-py, for one, reads
``?password=`` as the connection's password)."""


def without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` part, and with the value of any query parameter
    named like a secret (``?password=``) shown as ``***``: messages never carry a secret."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        parts = parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        shown = [(k, "***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in pairs]
        if shown != pairs:
            parts = parts._replace(query=urlencode(shown, safe="*"))
    return urlunsplit(parts)


LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback: where plain http
    may carry what must not cross a network (a key, a token, a header)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
