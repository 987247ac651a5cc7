"""Encode and decode envelopes: ``encode(envelope, framing) -> bytes``, ``decode(data)``.

Single-object framing (``C3 01`` + CRC-64-AVRO fingerprint) is the default and
needs no registry; Confluent framing (``00`` + schema id) is used when
``HERMES_SCHEMA_REGISTRY_URL`` is set. ``decode`` detects the framing itself.

:func:`default_codec` knows the shipped schemas and no registry; a program with a
registry configured gets its codec from :func:`codec_for` with the settings its start
read (the composition root hands it down), never from the environment here.
"""

from __future__ import annotations

import threading
from typing import Any

from hermesbus.base.config import HermesSettings
from hermesbus.connectors.schema_registry import RegistryConfig, SchemaRegistryClient
from hermesbus.contract.envelope import Envelope

from ._codec import Codec, SchemaRegistry, WriterSchema
from ._framing import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC, Framing

__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "Codec",
    "Framing",
    "SchemaRegistry",
    "WriterSchema",
    "codec_for",
    "decode",
    "decode_record",
    "default_codec",
    "encode",
]

_default: Codec | None = None
_registered: dict[RegistryConfig, Codec] = {}
_lock = threading.Lock()


def default_codec() -> Codec:
    """The process-wide codec over the shipped schemas, with no schema registry."""
    global _default  # noqa: PLW0603 - one lazily built codec per process
    if _default is None:
        with _lock:
            if _default is None:
                _default = Codec()
    return _default


def codec_for(bus: HermesSettings) -> Codec:
    """The codec for a bus with these settings: :func:`default_codec` when they name no
    schema registry, else one process-wide codec per registry (its schema ids cached)."""
    config = RegistryConfig.from_settings(bus)
    if config is None:
        return default_codec()
    with _lock:
        codec = _registered.get(config)
        if codec is None:
            codec = _registered[config] = Codec(registry=SchemaRegistryClient(config))
        return codec


def encode(envelope: Envelope, framing: Framing = "single-object") -> bytes:
    """Envelope -> bytes with the default codec."""
    return default_codec().encode(envelope, framing)


def decode(data: bytes, reader_schema: dict[str, Any] | str | None = None) -> Envelope:
    """Bytes (either framing) -> Envelope with the default codec; failures raise DecodeError."""
    return default_codec().decode(data, reader_schema)


def decode_record(data: bytes, reader_schema: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """Bytes -> the Avro record as ``reader_schema`` sees it (default: the current envelope)."""
    return default_codec().decode_record(data, reader_schema)
