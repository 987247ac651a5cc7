"""Signing keys: one list per identity, the first signs, every listed one verifies.

Where keys come from, first match wins per identity:

1. ``HERMES_KEY_<IDENTITY>`` (e.g. ``HERMES_KEY_APP``): ``kid=base64url[,kid=base64url]``;
2. the keyring file ``HERMES_KEYS_FILE``, else ``$HERMES_HOME/keys.json``: JSON
   ``{"version": 1, "keys": {"<identity>": [{"kid": ..., "secret": ...}, ...]}}``.

Those variables are read once, where a program starts, into a
:class:`~hermesbus.identity.KeySettings`; what is here is given the file and the variables.

The file is created (mode 0600) by ``hermesbus up`` on the embedded broker and by
``hermesbus keys init``, with ``public-keys.json`` beside it (the public halves apps
check replies with, see ``_public``); ``hermesbus keys rotate IDENTITY`` puts a new key first and
keeps the previous one, so two keys are live while a rotation rolls out. Secrets are
never printed: a key's repr shows its id only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hermesbus.errors import ConfigError
from hermesbus.identity._document import read_document

from ._public import PublicKeys

__all__ = [
    "ENV_PREFIX",
    "KEYS_FILE_ENV",
    "PUBLIC_KEYS_FILE_ENV",
    "PUBLIC_KEYS_NAME",
    "Key",
    "Keyring",
    "missing_key",
    "new_key",
]

ENV_PREFIX = "HERMES_KEY_"
KEYS_FILE_ENV = "HERMES_KEYS_FILE"
PUBLIC_KEYS_FILE_ENV = "HERMES_PUBLIC_KEYS_FILE"
PUBLIC_KEYS_NAME = "public-keys.json"
_IDENTITY = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MIN_SECRET = 16
"""Bytes; HMAC-SHA256 keys shorter than this are refused."""
_LIVE = 2
"""Keys kept per identity after a rotation: the new one and the one before."""


@dataclass(frozen=True, slots=True)
class Key:
    """One HMAC-SHA256 key; ``repr`` never shows the secret."""

    kid: str
    secret: bytes = field(repr=False)


def new_key(now: datetime | None = None) -> Key:
    """A fresh random 256-bit key with an id that tells when it was made."""
    moment = now or datetime.now(UTC)
    return Key(f"{moment:%Y%m%d}-{secrets.token_hex(4)}", secrets.token_bytes(32))


def check_identity(identity: str) -> str:
    if not _IDENTITY.match(identity):
        raise ConfigError(
            f"identity {identity!r}: use a lowercase letter, then letters, digits, - or _"
        )
    return identity


def _parse_env(name: str, value: str) -> list[Key]:
    keys = []
    for item in value.split(","):
        kid, sep, encoded = item.strip().partition("=")
        if not sep:
            raise ConfigError(f"{name}: expected kid=base64url[,kid=base64url], an item lacks '='")
        keys.append(_key(kid, encoded, name))
    return keys


def _key(kid: object, encoded: object, where: str) -> Key:
    if not isinstance(kid, str) or not _KID.match(kid):
        raise ConfigError(f"{where}: key id {kid!r} must be 1-64 letters, digits, '.', '-' or '_'")
    if not isinstance(encoded, str):
        raise ConfigError(f"{where}: the secret of key {kid!r} must be a base64url string")
    try:
        padded = encoded + "=" * (-len(encoded) % 4)
        secret = base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where}: the secret of key {kid!r} is not base64url") from exc
    if len(secret) < _MIN_SECRET:
        raise ConfigError(f"{where}: key {kid!r} has {len(secret)} bytes; use at least 32")
    return Key(kid, secret)


def _encode(secret: bytes) -> str:
    return base64.urlsafe_b64encode(secret).decode().rstrip("=")


def missing_key(identity: str, source: str) -> str:
    """No key for ``identity`` in ``source``: use the bus's keyring, never a new one (keys
    the running bus does not know get what they sign dead-lettered)."""
    variable = ENV_PREFIX + identity.upper().replace("-", "_")
    return (
        f"no signing key for identity {identity!r} in {source}: sign with the bus's own "
        f"keyring, the file its processes verify with: set {KEYS_FILE_ENV} to it, or "
        "HERMES_HOME to the bus's state folder (its keys.json; `hermesbus up` prints it as "
        f"`signing keys: PATH`), or set {variable}. Not `hermesbus keys init`: its new keys "
        "are unknown to the running bus, which dead-letters what they sign"
    )


class Keyring:
    """Keys by identity; read-only once built (``rotated`` and ``with_missing`` copy)."""

    def __init__(self, keys: Mapping[str, Sequence[Key]], *, source: str = "") -> None:
        self._keys = {check_identity(i): tuple(k) for i, k in keys.items() if k}
        self.source = source
        """Where the keys were read from (a path or the environment), for messages."""

    def __repr__(self) -> str:
        return f"Keyring({sorted(self._keys)}, source={self.source!r})"

    @property
    def identities(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def has(self, identity: str) -> bool:
        return identity in self._keys

    def lacking(self, identities: Iterable[str]) -> list[str]:
        """Those of ``identities`` (in their order) the keyring holds no key for."""
        return [identity for identity in identities if identity not in self._keys]

    def kids(self, identity: str) -> tuple[str, ...]:
        """The live key ids of ``identity``, the signing one first."""
        return tuple(key.kid for key in self._keys.get(identity, ()))

    def signing(self, identity: str) -> Key:
        """The key ``identity`` signs with (its first); ConfigError naming where to put one."""
        keys = self._keys.get(identity)
        if not keys:
            raise ConfigError(missing_key(identity, self.source or "the keyring"))
        return keys[0]

    def verifying(self, identity: str, kid: str) -> Key | None:
        """The live key ``kid`` of ``identity``, if there is one."""
        for key in self._keys.get(identity, ()):
            if key.kid == kid:
                return key
        return None

    def only(self, identities: Iterable[str]) -> Keyring:
        """The same keyring holding just ``identities`` (an app gets the app key only)."""
        wanted = set(identities)
        return Keyring({i: k for i, k in self._keys.items() if i in wanted}, source=self.source)

    def with_missing(self, identities: Iterable[str]) -> Keyring:
        """A copy with a new key for every identity in ``identities`` that has none."""
        keys = dict(self._keys)
        for identity in identities:
            keys.setdefault(check_identity(identity), (new_key(),))
        return Keyring(keys, source=self.source)

    def rotated(self, identity: str) -> Keyring:
        """A copy where ``identity`` signs with a new key and still accepts the previous one."""
        keys = dict(self._keys)
        keys[check_identity(identity)] = (new_key(), *keys.get(identity, ()))[:_LIVE]
        return Keyring(keys, source=self.source)

    # -- files and the environment ---------------------------------------------------------

    @classmethod
    def load(cls, path: Path, *, environ: Mapping[str, str] | None = None) -> Keyring:
        """Keys from ``HERMES_KEY_*`` in ``environ`` (the variables a program was started
        with, as its settings hold them; none by default) over the keyring file at ``path``
        (which may be absent)."""
        environ = {} if environ is None else environ
        keys: dict[str, Sequence[Key]] = dict(cls.read(path)._keys) if path.exists() else {}
        from_env = []
        for name, value in environ.items():
            if name.startswith(ENV_PREFIX) and value:
                identity = name[len(ENV_PREFIX) :].lower().replace("_", "-")
                keys[check_identity(identity)] = _parse_env(name, value)
                from_env.append(name)
        source = str(path) if path.exists() else ""
        if from_env:
            source = ", ".join([*sorted(from_env), *([source] if source else [])])
        return cls(keys, source=source or f"{path} (absent)")

    @classmethod
    def read(cls, path: Path) -> Keyring:
        """The keyring file at ``path``; ConfigError naming the file and what is wrong."""
        data = read_document(path, "keyring")
        keys: dict[str, list[Key]] = {}
        for identity, entries in data["keys"].items():
            where = f"{path}: {identity}"
            if not isinstance(entries, list):
                raise ConfigError(f"{where}: expected a list of keys")
            if not all(isinstance(entry, dict) for entry in entries):
                raise ConfigError(f'{where}: each key is {{"kid": ..., "secret": ...}}')
            keys[check_identity(str(identity))] = [
                _key(entry.get("kid"), entry.get("secret"), where) for entry in entries
            ]
        return cls(keys, source=str(path))

    def write(self, path: Path) -> None:
        """Write the keyring to ``path`` with mode 0600 (atomically: a temp file, renamed)."""
        document = {
            "version": 1,
            "keys": {
                identity: [{"kid": k.kid, "secret": _encode(k.secret)} for k in keys]
                for identity, keys in sorted(self._keys.items())
            },
        }
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=2)
                handle.write("\n")
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise ConfigError(f"cannot write the keyring {path}: {exc.strerror or exc}") from exc
        self.publish(path)

    def publish(self, path: Path) -> None:
        """Write the public keys of the reply signers beside the keyring file ``path``, if
        it holds any and the file there does not say the same already."""
        public = PublicKeys.of(self)
        target = path.with_name(PUBLIC_KEYS_NAME)
        if not public.identities:
            return
        with contextlib.suppress(ConfigError):
            if target.exists() and PublicKeys.read(target).document() == public.document():
                return
        public.write(target)

    @classmethod
    def ensure(cls, identities: Iterable[str], path: Path) -> Keyring:
        """Load the keyring, first adding a key for each of ``identities`` the file lacks."""
        wanted = list(identities)
        on_file = cls.read(path) if path.exists() else cls({}, source=str(path))
        complete = on_file.with_missing(wanted)
        if complete.identities != on_file.identities:
            complete.write(path)
        else:
            complete.publish(path)  # a keyring made before public keys were
        return cls.load(path)
