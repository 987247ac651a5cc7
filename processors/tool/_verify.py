"""Verification of a result before release: signature, output schema, verifier, content.

Keys come from the environment the tool service was handed only (the spec names the
variable; nothing reads the process's own) and are never logged.
Each failure is a :class:`~hermesbus.errors.VerificationError` whose message starts with
the check that failed (``signature``, ``json``, ``output_schema``, ``verifier``,
``sensitive_words``). The verifier itself is tool code: the service runs it in the
tool's worker (:func:`check_result` before, :func:`finish` after), never in-process.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from hermesbus.errors import VerificationError
from hermesbus.processors.tool._spec import SignatureConfig, ToolSpec

__all__ = [
    "ANY_VALUE",
    "DEFAULT_MAX_DEPTH",
    "Verified",
    "check_result",
    "check_signature",
    "finish",
    "json_depth",
    "schema_error",
]

STEPS = "verification_steps"
DEFAULT_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Verified:
    """A result that passed every check: its JSON value and the tool's verification steps."""

    value: Any
    steps: tuple[str, ...]


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar: 0); iterative, no recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


_HELD_VALIDATORS = 256


@functools.lru_cache(maxsize=_HELD_VALIDATORS)
def _validator(canonical: str) -> Any:
    """A compiled validator of the schema whose canonical JSON is ``canonical`` (specs are
    read from the store for each call: the same schema, new objects)."""
    schema = json.loads(canonical)
    return jsonschema.validators.validator_for(schema)(schema)


_BY_OBJECT: OrderedDict[int, tuple[Mapping[str, Any], Any]] = OrderedDict()
"""Validators by the schema object they were compiled for (held, so its id stays its own):
a spec read again with the same text is the same object (``spec_from_json``)."""


_HELD_LOCK = threading.Lock()
ANY_VALUE: Mapping[str, Any] = {}
"""The schema of a tool that declares none (every value is valid): one object, so that its
validator is found again by identity."""


def _validator_of(schema: Mapping[str, Any]) -> Any:
    with _HELD_LOCK:
        held = _BY_OBJECT.get(id(schema))
        if held is not None and held[0] is schema:
            _BY_OBJECT.move_to_end(id(schema))
            return held[1]
    validator = _validator(json.dumps(schema, sort_keys=True, separators=(",", ":")))
    with _HELD_LOCK:
        _BY_OBJECT[id(schema)] = (schema, validator)
        if len(_BY_OBJECT) > _HELD_VALIDATORS:
            _BY_OBJECT.popitem(last=False)
    return validator


def schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first validation error as ``path: message``; None when ``value`` is valid."""
    validator = _validator_of(schema)
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except RecursionError:
        return "(root): the value is nested too deeply to validate"
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{path}: {error.message}"


def check_signature(
    config: SignatureConfig, body: bytes, signature: str | None, env: Mapping[str, str]
) -> None:
    """Raise unless ``signature`` signs exactly ``body`` with the key named by ``key_env``."""
    if not signature:
        raise VerificationError("signature: the result carries no signature")
    if not signature.isascii():
        raise VerificationError("signature: the signature is not ASCII")
    key = env.get(config.key_env)
    if not key:
        raise VerificationError(f"signature: the key variable {config.key_env} is not set")
    if config.alg == "hmac-sha256":
        expected = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), signature.strip().lower().encode()):
            raise VerificationError("signature: HMAC-SHA256 does not match the body")
        return
    try:
        _ed25519_key(key).verify(base64.b64decode(signature, validate=True), body)
    except (InvalidSignature, binascii.Error, ValueError) as exc:
        raise VerificationError("signature: Ed25519 signature does not match the body") from exc


@functools.lru_cache(maxsize=64)
def _ed25519_key(text: str) -> Ed25519PublicKey:
    """The public key in ``text`` (PEM or base64 raw bytes), loaded once per text."""
    try:
        if text.lstrip().startswith("-----BEGIN"):
            key = load_pem_public_key(text.encode())
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise VerificationError(f"signature: the Ed25519 public key is malformed: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise VerificationError("signature: the PEM public key is not an Ed25519 key")
    return key


def check_result(
    spec: ToolSpec,
    body: bytes,
    signature: str | None,
    env: Mapping[str, str],
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """Signature (its key from ``env``), JSON (at most ``max_depth`` deep) and output
    schema; the JSON value."""
    if spec.signature is not None:
        check_signature(spec.signature, body, signature, env)
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise VerificationError(f"json: the result is not JSON: {exc}") from exc
    if json_depth(value) > max_depth:
        raise VerificationError(f"json: the result is nested deeper than {max_depth}")
    problem = schema_error(spec.output_schema or ANY_VALUE, value)
    if problem is not None:
        raise VerificationError(f"output_schema: {problem}")
    return value


def finish(spec: ToolSpec, value: Any) -> Verified:
    """The content checks after the verifier passed: sensitive words, then the steps."""
    if not spec.sensitive_words:
        return Verified(value, _steps(value))
    text = json.dumps(value, ensure_ascii=False).casefold()
    found = [word for word in spec.sensitive_words if word.casefold() in text]
    if found:
        raise VerificationError(f"sensitive_words: the result contains {len(found)} of them")
    return Verified(value, _steps(value))


def _steps(value: Any) -> tuple[str, ...]:
    steps = value.get(STEPS) if isinstance(value, dict) else None
    if isinstance(steps, list) and all(isinstance(s, str) for s in steps):
        return tuple(steps)
    return ()
