"""Where a process finds its keys: the keyring file, the apps' public keys, and keys given
in the environment (``HERMES_KEY_<IDENTITY>``), as one frozen value.

Read from the environment once, where a program starts
(:meth:`hermesbus.compose.settings.Settings.from_environment`); below that, a keyring is
loaded from these settings, never from whatever the environment says at the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, SecretStr

from hermesbus.identity._keys import (
    ENV_PREFIX,
    KEYS_FILE_ENV,
    PUBLIC_KEYS_FILE_ENV,
    PUBLIC_KEYS_NAME,
    Keyring,
)

__all__ = ["KeySettings"]


class KeySettings(BaseModel):
    """The keyring file, the public keys file, and the keys the environment gave."""

    model_config = ConfigDict(frozen=True)

    file: Path
    """``HERMES_KEYS_FILE``, else ``keys.json`` in the state folder."""
    public_file: Path | None = None
    """``HERMES_PUBLIC_KEYS_FILE``; None: ``public-keys.json`` beside :attr:`file`."""
    given: tuple[tuple[str, SecretStr], ...] = ()
    """``HERMES_KEY_<IDENTITY>`` variables with their values (secrets: never printed)."""

    @classmethod
    def from_environ(cls, home: Path, environ: Mapping[str, str]) -> Self:
        """What ``environ`` (a program's variables, given by its start) says: the keyring
        file (``HERMES_KEYS_FILE``, else ``keys.json`` in ``home``), the public keys file
        (``HERMES_PUBLIC_KEYS_FILE``) and the ``HERMES_KEY_*`` keys."""
        named, public = environ.get(KEYS_FILE_ENV), environ.get(PUBLIC_KEYS_FILE_ENV)
        return cls(
            file=Path(named) if named else home / "keys.json",
            public_file=Path(public) if public else None,
            given=tuple(
                (k, SecretStr(v))
                for k, v in sorted(environ.items())
                if k.startswith(ENV_PREFIX) and v
            ),
        )

    @property
    def public(self) -> Path:
        """The public keys apps check replies with."""
        return self.public_file or self.file.with_name(PUBLIC_KEYS_NAME)

    def load(self) -> Keyring:
        """The keys given here over the keyring file (which may be absent)."""
        return Keyring.load(self.file, environ=self._environ())

    def ensure(self, identities: Iterable[str]) -> Keyring:
        """The keyring, first adding to the file a key for each identity it lacks."""
        Keyring.ensure(identities, self.file)
        return self.load()

    def _environ(self) -> dict[str, str]:
        return {name: value.get_secret_value() for name, value in self.given}
