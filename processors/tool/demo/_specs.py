"""The demo tools' specs (schemas, probes, verifiers, fallbacks), keys and registration."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from hermesbus.processors.tool._mcp_specs import McpDocument, ProbeCall
from hermesbus.processors.tool._spec import Fallback, McpServer, SignatureConfig, ToolSpec
from hermesbus.processors.tool.demo.fixtures import DEMO_USER_ID
from hermesbus.processors.tool.demo.tools import DEMO_SIGNING_ENV, DEMO_VERIFY_ENV

__all__ = [
    "DEMO_TOOLS",
    "demo_keys",
    "demo_mcp_document",
    "demo_mcp_server",
    "demo_specs",
    "describe",
    "register_demo",
    "schemas",
]

_MODULE = "hermesbus.processors.tool.demo.tools"
DEMO_TOOLS = (
    "org_tool",
    "finance_tool",
    "ocr_tool",
    "trip_tool",
    "rule_engine_tool",
    "table_tool",
)
DEMO_WORKERS = 2
"""Worker processes per demo tool, started by the probes after the first (neither in the
start-up nor in a burst): two let one call run while the other's answer is read; more only
add memory on a 2-core machine, where the bus's own process is what a burst waits for."""

_STR = {"type": "string"}
_STEPS = {"type": "array", "items": _STR}
_FACTS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["subject", "relation", "object"],
        "properties": {"subject": _STR, "relation": _STR, "object": _STR},
    },
}
_INVOICE = {
    "type": "object",
    "required": ["id", "category", "amount", "date", "confidence"],
    "properties": {
        "id": _STR,
        "category": _STR,
        "amount": {"type": "number", "minimum": 0},
        "date": _STR,
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
}
_ITINERARY = {
    "type": "object",
    "required": ["city", "from", "to"],
    "properties": {"city": _STR, "from": _STR, "to": _STR},
}


def _obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


_SCHEMAS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "org_tool": (
        _obj(["user_id"], user_id=_STR),
        _obj(
            ["user_id", "name", "dept", "manager", "approval_chain"],
            user_id=_STR,
            name=_STR,
            dept=_STR,
            manager=_STR,
            approval_chain={"type": "array", "items": _STR},
            symbols={"type": "object"},
            facts=_FACTS,
            verification_steps=_STEPS,
        ),
    ),
    "finance_tool": (
        {
            "type": "object",
            "required": ["action", "user_id"],
            "properties": {
                "action": {"enum": ["budget", "submit"]},
                "user_id": _STR,
                "report_id": {"type": "string", "pattern": "^EXP-"},
                "amount": {"type": "number", "minimum": 0},
                "approver": _STR,
                "invoices": {"type": "array", "items": _STR},
            },
            "if": {"properties": {"action": {"const": "submit"}}},
            "then": {"required": ["report_id", "amount", "approver", "invoices"]},
        },
        {
            "type": "object",
            "oneOf": [
                {"required": ["dept", "budget_remaining", "currency"]},
                {"required": ["status", "report_id", "approver"]},
            ],
            "properties": {
                "dept": _STR,
                "budget_remaining": {"type": "number"},
                "currency": _STR,
                "status": {"const": "submitted"},
                "report_id": _STR,
                "approver": _STR,
                "facts": _FACTS,
                "verification_steps": _STEPS,
            },
        },
    ),
    "ocr_tool": (
        _obj(
            ["files"],
            files={
                "type": "array",
                "minItems": 1,
                "items": _obj(["uri"], name=_STR, uri=_STR),
            },
        ),
        _obj(
            ["invoices", "total", "currency", "confidence_min"],
            invoices={"type": "array", "items": _INVOICE},
            total={"type": "number"},
            currency=_STR,
            confidence_min={"type": "number"},
            itinerary=_ITINERARY,
            symbols={"type": "object"},
            verification_steps=_STEPS,
        ),
    ),
    "trip_tool": (
        _obj(
            ["user_id", "city", "from", "to", "invoices"],
            user_id=_STR,
            city=_STR,
            to=_STR,
            invoices={"type": "array", "items": _STR},
            **{"from": _STR},
        ),
        _obj(
            ["verified", "trip_id", "city", "from", "to", "facts"],
            verified={"type": "boolean"},
            trip_id=_STR,
            city=_STR,
            to=_STR,
            facts=_FACTS,
            verification_steps=_STEPS,
            **{"from": _STR},
        ),
    ),
    "rule_engine_tool": (
        _obj(
            ["dept", "invoices"],
            dept=_STR,
            invoices={"type": "array", "items": {"anyOf": [_STR, {"type": "object"}]}},
            itinerary=_ITINERARY,
        ),
        _obj(
            ["valid", "warnings", "approver"],
            valid={"type": "boolean"},
            warnings={"type": "array", "items": _STR},
            approver={"type": "string", "minLength": 1},
            verification_steps=_STEPS,
        ),
    ),
    "table_tool": (
        {
            "type": "object",
            "required": ["action"],
            "properties": {
                "action": {"enum": ["export", "merge"]},
                "table": _STR,
                "add_columns": {"type": "array", "items": {"type": ["string", "null"]}},
                "check_empty": {"type": ["string", "null"]},
                "tables": {"type": "array", "minItems": 2, "uniqueItems": True, "items": _STR},
            },
            "if": {"properties": {"action": {"const": "merge"}}},
            "then": {"required": ["tables"]},
            "else": {"required": ["table"]},
        },
        _obj(
            ["file", "rows", "facts"],
            table=_STR,
            title=_STR,
            tables={"type": "array", "items": _STR},
            names=_STR,
            file=_STR,
            rows={"type": "integer", "minimum": 0},
            columns={"type": "array", "items": _STR},
            column_count={"type": "integer"},
            empty_rows={"type": "integer", "minimum": 0},
            facts=_FACTS,
            verification_steps=_STEPS,
        ),
    ),
}

_RULES_MOCK = {
    "valid": False,
    "warnings": ["规则引擎暂不可用：以下为预设结果，需人工复核"],
    "approver": "张主管",
    "verification_steps": ["规则引擎降级：返回预设的合规结果，未实际校验"],
}
_FALLBACKS = {
    "org_tool": Fallback(strategy="cache", stale_after_s=3600),
    "finance_tool": Fallback(strategy="cache", stale_after_s=1800),
    "ocr_tool": Fallback(strategy="cache", stale_after_s=600),
    "trip_tool": Fallback(strategy="cache", stale_after_s=3600),
    "rule_engine_tool": Fallback(strategy="mock", mock_result=_RULES_MOCK),
    "table_tool": Fallback(strategy="cache", stale_after_s=600),
}
_SHENZHEN = {"city": "深圳", "from": "2024-05-12", "to": "2024-05-15"}
_INVOICE_IDS = ["inv-001", "inv-002", "inv-003"]
_SAMPLES: dict[str, dict[str, Any]] = {
    "org_tool": {"user_id": DEMO_USER_ID},
    "finance_tool": {"action": "budget", "user_id": DEMO_USER_ID},
    "ocr_tool": {
        "files": [
            {"name": "photo-1.jpg", "uri": "demo://expense/photo-1.jpg"},
            {"name": "photo-2.jpg", "uri": "demo://expense/photo-2.jpg"},
        ]
    },
    "trip_tool": {"user_id": DEMO_USER_ID, **_SHENZHEN, "invoices": _INVOICE_IDS},
    "rule_engine_tool": {"dept": "采购部", "invoices": _INVOICE_IDS, "itinerary": _SHENZHEN},
    "table_tool": {"action": "export", "table": "A"},
}
"""A call of each demo tool that it answers (``tools chaos`` makes it under faults)."""
_DESCRIPTIONS = {
    "org_tool": "demo directory: department, manager, approval chain",
    "finance_tool": "demo ledger: department budget, expense submission",
    "ocr_tool": "demo OCR of the two demo uploads (slow: about 1 s)",
    "trip_tool": "demo travel system: trip verification",
    "rule_engine_tool": "demo travel policy: lodging cap, approver",
    "table_tool": "demo database: tables exported to Excel, merged",
}


def schemas(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A demo tool's input and output JSON Schemas."""
    return _SCHEMAS[name]


def describe(name: str) -> str:
    """A demo tool's description."""
    return _DESCRIPTIONS[name]


def demo_specs() -> list[ToolSpec]:
    """The six demo tools, each signed with Ed25519 (public key in HERMES_DEMO_VERIFY_KEY)."""
    signature = SignatureConfig(alg="ed25519", key_env=DEMO_VERIFY_ENV)
    specs = []
    for name in DEMO_TOOLS:
        stem = name.removesuffix("_tool")
        input_schema, output_schema = _SCHEMAS[name]
        specs.append(
            ToolSpec(
                name=name,
                kind="python",
                target=f"{_MODULE}:{name}",
                description=_DESCRIPTIONS[name],
                input_schema=input_schema,
                output_schema=output_schema,
                health=f"{_MODULE}:{stem}_probe",
                verifier=f"{_MODULE}:{stem}_verify",
                fallback=_FALLBACKS[name],
                sample_arguments=_SAMPLES[name],
                signature=signature,
                env=(DEMO_SIGNING_ENV,),
                timeout_s=10.0 if name == "ocr_tool" else 5.0,
                workers=DEMO_WORKERS,
            )
        )
    return specs


def demo_keys() -> dict[str, str]:
    """A fresh Ed25519 keypair, variables to add to the environment the tool service is
    given: ``HERMES_DEMO_SIGNING_KEY`` (private, for the workers) and
    ``HERMES_DEMO_VERIFY_KEY``."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {
        DEMO_SIGNING_ENV: base64.b64encode(private).decode("ascii"),
        DEMO_VERIFY_ENV: base64.b64encode(public).decode("ascii"),
    }


def demo_mcp_server(descriptions: Path | None = None) -> McpServer:
    """The demo MCP server over stdio (``descriptions``: its file of changed descriptions)."""
    command = [sys.executable, "-m", "hermesbus.processors.tool.demo.mcp_server"]
    if descriptions is not None:
        command += ["--descriptions", str(descriptions)]
    return McpServer(name="demo", transport="stdio", command=tuple(command))


def demo_mcp_document() -> McpDocument:
    """What admission needs of the demo MCP server's tools that the server does not say:
    the verifiers, fallbacks, signature and timeouts of their python twins, and the probe
    call (its ``probe`` tool, which is not admitted)."""
    tools = {
        name: {
            "verifier": f"{_MODULE}:{name.removesuffix('_tool')}_verify",
            "fallback": _FALLBACKS[name].model_dump(exclude_none=True),
            "timeout_s": 10.0 if name == "ocr_tool" else 5.0,
            "probe": {"arguments": {"tool": name}},
            "sample_arguments": _SAMPLES[name],
        }
        for name in DEMO_TOOLS
    }
    signature = {"alg": "ed25519", "key_env": DEMO_VERIFY_ENV}
    return McpDocument(
        server="demo",
        env=(DEMO_SIGNING_ENV,),
        probe=ProbeCall(tool="probe"),
        defaults={"signature": signature},
        tools=tools,
        skip=("probe",),
    )


class _Registers(Protocol):
    async def register(self, spec: ToolSpec) -> ToolSpec: ...


@runtime_checkable
class _RegistersMcp(_Registers, Protocol):
    async def register_mcp(self, document: McpDocument, server: McpServer) -> list[ToolSpec]: ...


async def register_demo(registry: _Registers, *, mcp: bool = False) -> list[str]:
    """Register the six demo tools with a ToolService or ToolRegistry (``mcp``: as served
    by the demo MCP server, through a ToolService); their names."""
    if mcp:
        if not isinstance(registry, _RegistersMcp):
            raise TypeError("the demo's MCP tools are registered through a ToolService")
        specs = await registry.register_mcp(demo_mcp_document(), demo_mcp_server())
        return [spec.name for spec in specs]
    return [(await registry.register(spec)).name for spec in demo_specs()]
