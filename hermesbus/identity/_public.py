"""Signatures apps can check: Ed25519 over what apps read, with public keys apps hold.

The HMAC signature (``_sign``) proves a record to the bus's own processes, which share
the keyring; an app cannot check it without holding the secret that forges it. So what
apps read, the records of ``hermes.conversation.out`` (replies and notices), is also
signed with Ed25519 in the ``hermes.signature.public`` header, as
``v1:<identity>:<key id>:<base64url signature>`` over the same fields as the HMAC
(identity, key id, topic, key, value), so a signature copied to another record, topic
or identity does not verify.

The Ed25519 key of an identity is derived from its HMAC key (HMAC-SHA256 of the secret
over a fixed label, as the 32-byte seed): it needs nothing new in the keyring, has the
same key id, and rotates with it. Its public half is written, beside the keyring, to
``public-keys.json`` (mode 0644) whenever the keyring file is written (``hermesbus up``,
``hermesbus keys init``, ``hermesbus keys rotate``); an app is given that file
(``HERMES_PUBLIC_KEYS_FILE``, or ``Client(trust=PATH)``), never the keyring. Only the
identities that may write replies (:data:`PUBLIC_SIGNERS`) are in it: a key an app holds
(``app``) cannot sign a reply an app believes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import struct
import time
from collections.abc import Mapping, Sequence
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from hermesbus.errors import ConfigError, IdentityError
from hermesbus.identity._document import read_document
from hermesbus.topics import CONVERSATION_OUT

if TYPE_CHECKING:
    from ._keys import Key, Keyring

__all__ = ["PUBLIC_SIGNATURE", "PUBLIC_SIGNERS", "PublicKeys", "PublicSigner", "read_by_apps"]

log = logging.getLogger(__name__)

PUBLIC_SIGNATURE: Final = "hermes.signature.public"
"""The header holding ``v1:<identity>:<key id>:<base64url Ed25519 signature>``."""
PUBLIC_SIGNERS: Final = frozenset({"conversation", "dispatcher"})
"""Who writes what apps read: ``processors.protocol.WRITERS[CONVERSATION_OUT]`` (a test
checks); apps trust a reply signed by one of them, of its own ``source``, only."""
_LABEL = b"hermesbus-ed25519-seed-v1"
_DOMAIN = b"hermesbus-public-v1"
_NO_KEY = struct.pack(">I", 0xFFFFFFFF)
_IDENTITY = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_SHAPE = re.compile(r"^v1:([a-z][a-z0-9_-]{0,31}):([A-Za-z0-9_.-]{1,64}):([A-Za-z0-9_-]{86})$")
_RELOAD_EVERY_S = 5.0


def read_by_apps(topic: str) -> bool:
    """Whether apps read ``topic`` (whatever its prefix): its records get a public signature."""
    return topic.endswith(CONVERSATION_OUT)


def _private(key: Key) -> Ed25519PrivateKey:
    seed = hmac.new(key.secret, _LABEL, sha256).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def _message(identity: str, kid: str, topic: str, record_key: bytes | None, value: bytes) -> bytes:
    parts = [_DOMAIN, identity.encode(), kid.encode(), topic.encode()]
    framed = b"".join(struct.pack(">I", len(p)) + p for p in parts)
    if record_key is None:
        framed += _NO_KEY
    else:
        framed += struct.pack(">I", len(record_key)) + record_key
    return framed + struct.pack(">I", len(value)) + value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


class PublicSigner:
    """Signs records as ``identity`` with the Ed25519 key derived from its signing key."""

    def __init__(self, identity: str, key: Key) -> None:
        self.identity = identity
        self.kid = key.kid
        self._key = _private(key)

    def header(self, topic: str, key: bytes | None, value: bytes) -> tuple[str, bytes]:
        signature = self._key.sign(_message(self.identity, self.kid, topic, key, value))
        return PUBLIC_SIGNATURE, f"v1:{self.identity}:{self.kid}:{_b64(signature)}".encode()


class PublicKeys:
    """The public keys an app checks replies with: identity -> key id -> key.

    ``verify`` names the identity that signed a record, or raises IdentityError saying
    why not. Loaded from a file, an unknown key id re-reads it (at most every few
    seconds), so a key rotated in while the app runs is picked up.
    """

    def __init__(
        self, keys: Mapping[str, Mapping[str, Ed25519PublicKey]], *, source: str = ""
    ) -> None:
        self._keys = {i: dict(k) for i, k in keys.items() if i in PUBLIC_SIGNERS and k}
        self.source = source
        self._path: Path | None = None
        self._read_at = 0.0

    def __repr__(self) -> str:
        return f"PublicKeys({sorted(self._keys)}, source={self.source!r})"

    @property
    def identities(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    @classmethod
    def of(cls, keyring: Keyring) -> PublicKeys:
        """The public halves of the reply signers' keys in ``keyring``."""
        keys = {
            identity: {
                kid: _private(found).public_key()
                for kid in keyring.kids(identity)
                if (found := keyring.verifying(identity, kid)) is not None
            }
            for identity in keyring.identities
            if identity in PUBLIC_SIGNERS
        }
        return cls(keys, source=keyring.source)

    @classmethod
    def load(cls, path: Path) -> PublicKeys:
        """The public keys file at ``path``; ConfigError if there is none or it holds no
        reply signer: an app must not read replies it cannot check."""
        if not path.exists():
            raise ConfigError(
                f"no public keys to check replies with: {path} does not exist. `hermesbus up` "
                f"and `hermesbus keys init|rotate` write {path.name} beside the bus's keyring; "
                "give the app that file (HERMES_PUBLIC_KEYS_FILE=PATH or Client(trust=PATH)), "
                "never the keyring itself"
            )
        found = cls.read(path)
        if not found.identities:
            raise ConfigError(
                f"the public keys file {path} holds no key of {', '.join(sorted(PUBLIC_SIGNERS))}"
            )
        found._path, found._read_at = path, time.monotonic()
        return found

    @classmethod
    def read(cls, path: Path) -> PublicKeys:
        data = read_document(path, "public keys file")
        keys: dict[str, dict[str, Ed25519PublicKey]] = {}
        for identity, entries in data["keys"].items():
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ConfigError(f'{path}: {identity}: expected [{{"kid": ..., "public": ...}}]')
            if not _IDENTITY.match(str(identity)):
                raise ConfigError(f"{path}: {identity!r} is not an identity")
            keys[str(identity)] = {
                str(e.get("kid")): _public(e.get("public"), f"{path}: {identity}") for e in entries
            }
        return cls(keys, source=str(path))

    def document(self) -> dict[str, Any]:
        raw = Encoding.Raw, PublicFormat.Raw
        return {
            "version": 1,
            "keys": {
                identity: [
                    {"kid": kid, "public": _b64(k.public_bytes(*raw))} for kid, k in keys.items()
                ]
                for identity, keys in sorted(self._keys.items())
            },
        }

    def write(self, path: Path) -> None:
        """Write the file (mode 0644: public) atomically; ConfigError if it cannot be."""
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(self.document(), handle, indent=2)
                handle.write("\n")
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise ConfigError(
                f"cannot write the public keys {path}: {exc.strerror or exc}"
            ) from exc

    def verify(
        self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> str:
        """The reply signer whose key made the record's public signature."""
        found = [bytes(v) for k, v in headers if k == PUBLIC_SIGNATURE]
        if len(found) != 1:
            what = f"{len(found)} {PUBLIC_SIGNATURE} headers" if found else f"no {PUBLIC_SIGNATURE}"
            raise IdentityError("identity.unsigned", f"{what}: not signed for apps")
        match = _SHAPE.match(found[0].decode("ascii", "replace"))
        if match is None:
            raise IdentityError(
                "identity.malformed", f"{PUBLIC_SIGNATURE} is not v1:<identity>:<key id>:<sig>"
            )
        identity, kid, text = match.groups()
        public = self._key(identity, kid)
        if public is None:
            raise IdentityError(
                "identity.unknown_key",
                f"signed as {identity!r} with key {kid!r}, not a public key of a reply signer "
                f"in {self.source}",
            )
        try:
            public.verify(_unb64(text), _message(identity, kid, topic, key, value))
        except (InvalidSignature, binascii.Error, ValueError) as exc:
            raise IdentityError(
                "identity.bad_signature",
                f"the public signature of {identity!r} (key {kid!r}) does not match this record "
                f"on {topic}",
            ) from exc
        return identity

    def _key(self, identity: str, kid: str) -> Ed25519PublicKey | None:
        found = self._keys.get(identity, {}).get(kid)
        now = time.monotonic()
        if found is None and self._path is not None and now - self._read_at > _RELOAD_EVERY_S:
            self._read_at = now
            try:
                self._keys = PublicKeys.read(self._path)._keys
            except ConfigError as exc:
                log.warning("public keys reload failed: %s", exc)
                return None
            found = self._keys.get(identity, {}).get(kid)
        return found


def _public(encoded: object, where: str) -> Ed25519PublicKey:
    wrong = ConfigError(f"{where}: a public key is not 32 bytes of base64url")
    if not isinstance(encoded, str):
        raise wrong
    try:
        return Ed25519PublicKey.from_public_bytes(_unb64(encoded))
    except (binascii.Error, ValueError) as exc:
        raise wrong from exc
