"""The Avro schemas (``*.avsc``), the source of truth of every envelope and payload.

``history/<full name>/v<N>.avsc`` keeps every earlier version of the top-level
schemas, so data written with any of them still decodes.
"""

from pathlib import Path

__all__ = ["ENVELOPE", "SCHEMAS_DIR"]

SCHEMAS_DIR = Path(__file__).resolve().parent
"""The folder of the ``.avsc`` files shipped with the package."""

ENVELOPE = "hermes.mcp.Envelope"
"""Full name of the top-level schema every topic value is written with."""
