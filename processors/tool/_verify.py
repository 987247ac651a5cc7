"""Verification of a result before release: signature, output schema, verifier, content.

Keys come from the environment only (the spec names the variable) and are never logged.
Each failure is a :class:`~hermesbus.errors.VerificationError` whose message starts with
the check that failed (``signature``, ``json``, ``output_schema``, ``verifier``,
``sensitive_words``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from hermesbus.errors import ToolError, VerificationError

from ._spec import SignatureConfig, ToolSpec

__all__ = ["Verified", "check_signature", "resolve", "schema_error", "verify"]

STEPS = "verification_steps"


@dataclass(frozen=True, slots=True)
class Verified:
    """A result that passed every check: its JSON value and the tool's verification steps."""

    value: Any
    steps: tuple[str, ...]


def resolve(target: str) -> Callable[..., Any]:
    """The callable a ``module:function`` target names."""
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise ToolError(f"{target!r} is not module:function")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ToolError(f"cannot import {target}: {exc}") from exc
    if not callable(function):
        raise ToolError(f"{target} is not callable")
    return function  # type: ignore[no-any-return]


def schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first validation error as ``path: message``; None when ``value`` is valid."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
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
    key = env.get(config.key_env)
    if not key:
        raise VerificationError(f"signature: the key variable {config.key_env} is not set")
    if config.alg == "hmac-sha256":
        expected = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature.strip().lower()):
            raise VerificationError("signature: HMAC-SHA256 does not match the body")
        return
    try:
        _ed25519_key(key).verify(base64.b64decode(signature, validate=True), body)
    except (InvalidSignature, binascii.Error, ValueError) as exc:
        raise VerificationError("signature: Ed25519 signature does not match the body") from exc


def _ed25519_key(text: str) -> Ed25519PublicKey:
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


def verify(
    spec: ToolSpec,
    body: bytes,
    signature: str | None,
    verifier: Callable[[Any], Any],
    env: Mapping[str, str] | None = None,
) -> Verified:
    """Run every check of ``spec`` on the exact body bytes; the first failure raises."""
    if spec.signature is not None:
        check_signature(spec.signature, body, signature, os.environ if env is None else env)
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise VerificationError(f"json: the result is not JSON: {exc}") from exc
    problem = schema_error(spec.output_schema or {}, value)
    if problem is not None:
        raise VerificationError(f"output_schema: {problem}")
    _run_verifier(spec, verifier, value)
    _check_words(spec, value)
    return Verified(value, _steps(value))


def _run_verifier(spec: ToolSpec, verifier: Callable[[Any], Any], value: Any) -> None:
    try:
        passed = verifier(value)
    except Exception as exc:  # a verifier says no by returning False or raising anything
        raise VerificationError(f"verifier: {spec.verifier} raised {exc!r}") from exc
    if passed is not True:
        raise VerificationError(f"verifier: {spec.verifier} rejected the result")


def _check_words(spec: ToolSpec, value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False).casefold()
    found = [word for word in spec.sensitive_words if word.casefold() in text]
    if found:
        raise VerificationError(f"sensitive_words: the result contains {len(found)} of them")


def _steps(value: Any) -> tuple[str, ...]:
    steps = value.get(STEPS) if isinstance(value, dict) else None
    if isinstance(steps, list) and all(isinstance(s, str) for s in steps):
        return tuple(steps)
    return ()
