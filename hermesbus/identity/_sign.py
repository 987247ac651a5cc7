"""Signing records and checking who signed them.

A component signs every record it produces with HMAC-SHA256 over the record's topic,
key and value (the encoded envelope), and puts the result in the ``hermes.signature``
header as ``v1:<identity>:<key id>:<mac>``. The identity and key id are inside the
MAC too, so neither can be swapped, and a record copied to another topic no longer
verifies. Receivers recompute the MAC with the signer's live key.

What apps read (``hermes.conversation.out``) is signed twice: the MAC for the bus, and
an Ed25519 signature for apps, who hold only public keys (see ``_public``).
"""

from __future__ import annotations

import base64
import hmac
import logging
import re
import struct
import time
from collections.abc import Callable, Sequence
from hashlib import sha256
from typing import Final

from hermesbus.errors import ConfigError, IdentityError

from ._keys import Key, Keyring, check_identity
from ._public import PUBLIC_SIGNATURE, PUBLIC_SIGNERS, PublicSigner, read_by_apps

__all__ = ["SIGNATURE", "Signer", "Verifier", "signature_of"]

log = logging.getLogger(__name__)

SIGNATURE: Final = "hermes.signature"
"""The header holding ``v1:<identity>:<key id>:<base64url HMAC-SHA256>``."""
_VERSION = "v1"
_DOMAIN = b"hermesbus-record-v1"
_NO_KEY = struct.pack(">I", 0xFFFFFFFF)
_SHAPE = re.compile(r"^v1:([a-z][a-z0-9_-]{0,31}):([A-Za-z0-9_.-]{1,64}):([A-Za-z0-9_-]{43})$")
_RELOAD_EVERY_S = 5.0


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data))


def _mac(key: Key, identity: str, topic: str, record_key: bytes | None, value: bytes) -> bytes:
    mac = hmac.new(key.secret, digestmod=sha256)
    for part in (_DOMAIN, identity.encode(), key.kid.encode(), topic.encode()):
        mac.update(_field(part))
        mac.update(part)
    if record_key is None:
        mac.update(_NO_KEY)
    else:
        mac.update(_field(record_key))
        mac.update(record_key)
    mac.update(_field(value))
    mac.update(value)
    return mac.digest()


def signature_of(headers: Sequence[tuple[str, bytes]]) -> bytes | None:
    """The value of the (single) signature header, or None; several count as none."""
    found = [bytes(v) for k, v in headers if k == SIGNATURE]
    return found[0] if len(found) == 1 else None


class Signer:
    """Signs records as ``identity`` with its first key in ``keyring``."""

    def __init__(self, identity: str, keyring: Keyring) -> None:
        self.identity = check_identity(identity)
        self._key = keyring.signing(identity)
        self._public = PublicSigner(identity, self._key) if identity in PUBLIC_SIGNERS else None

    @property
    def kid(self) -> str:
        return self._key.kid

    def header(self, topic: str, key: bytes | None, value: bytes) -> tuple[str, bytes]:
        """The ``hermes.signature`` header for a record of ``topic`` with ``key`` and ``value``."""
        mac = _mac(self._key, self.identity, topic, key, value)
        text = base64.urlsafe_b64encode(mac).decode().rstrip("=")
        return SIGNATURE, f"{_VERSION}:{self.identity}:{self._key.kid}:{text}".encode()

    def sign(
        self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> tuple[tuple[str, bytes], ...]:
        """``headers`` without any signature they carried, plus this signer's (and, on a
        topic apps read, its public signature if it is a reply signer)."""
        kept = tuple((k, v) for k, v in headers if k not in (SIGNATURE, PUBLIC_SIGNATURE))
        if self._public is not None and read_by_apps(topic):
            return (*kept, self.header(topic, key, value), self._public.header(topic, key, value))
        return (*kept, self.header(topic, key, value))


class Verifier:
    """Tells which identity signed a record, or raises :class:`IdentityError` saying why not.

    ``reload`` re-reads the keys when a record names a key id this verifier does not know
    (at most every few seconds), so a key rotated in while the process runs is picked up.
    """

    def __init__(self, keyring: Keyring, reload: Callable[[], Keyring] | None = None) -> None:
        self._keyring = keyring
        self._reload = reload
        self._reloaded_at = 0.0

    def signer(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
    ) -> str:
        """The identity whose key made the record's signature."""
        raw = signature_of(headers)
        if raw is None:
            count = sum(1 for k, _ in headers if k == SIGNATURE)
            if count:
                raise IdentityError("identity.malformed", f"{count} {SIGNATURE} headers; one only")
            raise IdentityError(
                "identity.unsigned", f"no {SIGNATURE} header: the record is unsigned"
            )
        match = _SHAPE.match(raw.decode("ascii", "replace"))
        if match is None:
            raise IdentityError(
                "identity.malformed", f"{SIGNATURE} is not v1:<identity>:<key id>:<mac>"
            )
        identity, kid, text = match.groups()
        found = self._key(identity, kid)
        if found is None:
            raise IdentityError(
                "identity.unknown_key",
                f"signed as {identity!r} with key {kid!r}, which is not a live key of {identity!r}",
            )
        expected = base64.urlsafe_b64encode(_mac(found, identity, topic, key, value)).rstrip(b"=")
        if not hmac.compare_digest(expected, text.encode()):
            raise IdentityError(
                "identity.bad_signature",
                f"the signature of {identity!r} (key {kid!r}) does not match this record "
                f"on {topic}: altered, copied from another topic, or signed with another key",
            )
        return identity

    def _key(self, identity: str, kid: str) -> Key | None:
        found = self._keyring.verifying(identity, kid)
        now = time.monotonic()
        if found is None and self._reload is not None and now - self._reloaded_at > _RELOAD_EVERY_S:
            self._reloaded_at = now
            try:
                self._keyring = self._reload()
            except ConfigError as exc:
                log.warning("keyring reload failed: %s", exc)
                return None
            found = self._keyring.verifying(identity, kid)
        return found
