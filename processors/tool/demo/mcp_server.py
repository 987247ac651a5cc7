"""The six demo tools served by an MCP server (the SDK's ``Server``), over stdio or HTTP.

``python -m hermesbus.processors.tool.demo.mcp_server`` serves them over stdio;
``--port N`` over streamable HTTP at ``http://127.0.0.1:N/mcp``. Each tool has the schemas
of its python twin (``demo_specs``) and runs the same function: its answer is the signed
JSON body as text, the same value as structured content, and the Ed25519 signature in
the result's ``_meta`` under :data:`SIGNATURE_META`, so the tool processor verifies
exactly what it verifies of the python tools. A ``probe`` tool answers each tool's probe
(``{"tool": NAME}``), the declared probe call of the demo's MCP spec.

The OCR reports progress when it begins (``notifications/progress``, when the caller
asked for it). ``--descriptions FILE`` (a JSON object, tool name to description) is read at every
listing: a test changes a description there to play a server that changes what it offers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from hermesbus.processors.tool.demo import tools
from hermesbus.processors.tool.demo._specs import DEMO_TOOLS, describe, schemas

__all__ = ["PROBE_TOOL", "SIGNATURE_META", "build", "main"]

SIGNATURE_META = "hermesbus/signature"
PROBE_TOOL = "probe"
_PROBE_INPUT = {
    "type": "object",
    "required": ["tool"],
    "properties": {"tool": {"enum": list(DEMO_TOOLS)}},
}
_PROBE_OUTPUT = {
    "type": "object",
    "required": ["latency_ms", "success_rate"],
    "properties": {
        "latency_ms": {"type": "number"},
        "success_rate": {"type": "number"},
        "quota_remaining": {"type": ["integer", "null"]},
    },
}


def _overrides(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        return {}
    found = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _listing(descriptions: Path | None) -> list[types.Tool]:
    overrides = _overrides(descriptions)
    offered = []
    for name in DEMO_TOOLS:
        input_schema, output_schema = schemas(name)
        offered.append(
            types.Tool(
                name=name,
                description=overrides.get(name, describe(name)),
                input_schema=input_schema,
                output_schema=output_schema,
                annotations=types.ToolAnnotations(read_only_hint=name != "finance_tool"),
            )
        )
    offered.append(
        types.Tool(
            name=PROBE_TOOL,
            description="the health of a demo tool: latency, success rate, quota",
            input_schema=_PROBE_INPUT,
            output_schema=_PROBE_OUTPUT,
            annotations=types.ToolAnnotations(read_only_hint=True),
        )
    )
    return offered


def _probe(arguments: dict[str, Any]) -> tuple[bytes, None]:
    stem = str(arguments.get("tool", "")).removesuffix("_tool")
    answer = getattr(tools, f"{stem}_probe")()
    return json.dumps(answer).encode(), None


def _run(name: str, arguments: dict[str, Any]) -> tuple[bytes, str | None]:
    if name == PROBE_TOOL:
        return _probe(arguments)
    signed = getattr(tools, name)(arguments)
    return signed.body, signed.signature


def build(descriptions: Path | None = None) -> Server[Any]:
    """The demo server (``descriptions``: the file of changed descriptions, if any)."""

    async def list_tools(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_listing(descriptions))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        if name not in DEMO_TOOLS and name != PROBE_TOOL:
            return _error(f"unknown tool {name!r}")
        if name == "ocr_tool":  # the slow one says it has begun (a no-op unless asked)
            files = arguments.get("files")
            total = len(files) if isinstance(files, list) else None
            await ctx.session.report_progress(0, total, "reading the uploads")
        try:  # the demo OCR sleeps: in a thread, so other calls go on meanwhile
            body, signature = await anyio.to_thread.run_sync(_run, name, arguments)
        except tools.DemoToolError as exc:
            return _error(f"{exc.status_code}: {exc}")
        except Exception as exc:  # a tool's failure is a result, never a dead server
            return _error(f"{type(exc).__name__}: {exc}")
        meta = {SIGNATURE_META: signature} if signature else None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=body.decode())],
            structured_content=json.loads(body),
            _meta=meta,
        )

    return Server("hermesbus-demo-tools", on_list_tools=list_tools, on_call_tool=call_tool)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def _stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hermesbus-demo-mcp", description=__doc__)
    parser.add_argument("--port", type=int, help="serve streamable HTTP on this port")
    parser.add_argument("--descriptions", type=Path, help="JSON file of changed descriptions")
    args = parser.parse_args(argv)
    server = build(args.descriptions)
    if args.port is None:
        anyio.run(_stdio, server)
        return 0
    import uvicorn  # noqa: PLC0415 - only for HTTP

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
