"""Proven component identity: every record is signed, every receiver checks the signer.

A component (``conversation``, ``dispatcher``, ``tool``, ``memory``, or ``app`` for
applications) signs what it produces with its own key (HMAC-SHA256 over topic, key
and value, in the ``hermes.signature`` header); what apps read is also signed with
Ed25519 (``hermes.signature.public``), checked by apps with public keys (``_public``).
A receiver checks the signature, that the signer is the component its ``source``
names, and that this component may write this topic with this body. See ``_keys`` for
where keys come from.
"""

from ._guard import Guard, SourcePolicy, WritePolicy
from ._keys import (
    ENV_PREFIX,
    KEYS_FILE_ENV,
    PUBLIC_KEYS_FILE_ENV,
    Key,
    Keyring,
    check_identity,
    new_key,
)
from ._public import PUBLIC_SIGNATURE, PUBLIC_SIGNERS, PublicKeys, read_by_apps
from ._settings import KeySettings
from ._sign import SIGNATURE, Signer, Verifier, signature_of

__all__ = [
    "APP",
    "ENV_PREFIX",
    "KEYS_FILE_ENV",
    "PUBLIC_KEYS_FILE_ENV",
    "PUBLIC_SIGNATURE",
    "PUBLIC_SIGNERS",
    "SIGNATURE",
    "Guard",
    "Key",
    "KeySettings",
    "Keyring",
    "PublicKeys",
    "Signer",
    "SourcePolicy",
    "Verifier",
    "WritePolicy",
    "check_identity",
    "new_key",
    "read_by_apps",
    "signature_of",
]

APP = "app"
"""The identity of applications: they write user turns to the ingress topic, nothing else."""
