"""Proven component identity: every record is signed, every receiver checks the signer.

A component (``conversation``, ``dispatcher``, ``tool``, ``memory``, or ``app`` for
applications) signs what it produces with its own key (HMAC-SHA256 over topic, key
and value, in the ``hermes.signature`` header). A receiver checks the signature,
that the signer is the component its ``source`` names, and that this component may
write this topic with this body. See ``_keys`` for where keys come from.
"""

from ._guard import Guard, SourcePolicy, WritePolicy
from ._keys import ENV_PREFIX, KEYS_FILE_ENV, Key, Keyring, check_identity, keys_path, new_key
from ._sign import SIGNATURE, Signer, Verifier, signature_of

__all__ = [
    "APP",
    "ENV_PREFIX",
    "KEYS_FILE_ENV",
    "SIGNATURE",
    "Guard",
    "Key",
    "Keyring",
    "Signer",
    "SourcePolicy",
    "Verifier",
    "WritePolicy",
    "check_identity",
    "keys_path",
    "new_key",
    "signature_of",
]

APP = "app"
"""The identity of applications: they write user turns to the ingress topic, nothing else."""
