"""A small MCP server (the SDK's ``Server``) that misbehaves on request, for the tests.

``echo`` answers its text (``{"echo": text}``); ``stall`` sleeps in a thread for
``seconds`` (the server stays responsive); ``wedge`` blocks the server's own event loop
for ``seconds`` (it answers nothing, pings included); ``linger`` waits ``seconds`` on the
server's event loop and, when the client cancels it (``notifications/cancelled``), appends
``cancelled linger`` to the file after ``--cancelled-log``. Run: ``python mcp_hostile.py``;
``--die-on-list``: it exits when asked for its tools (a server that crashes at once);
``--slow-start S``: it sleeps S seconds before it serves.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_TEXT_IN = {"type": "object", "properties": {"text": {"type": "string"}}}
_TEXT_OUT = {"type": "object", "required": ["echo"], "properties": {"echo": {"type": "string"}}}
_WAIT_IN = {"type": "object", "properties": {"seconds": {"type": "number"}}}
_TOOLS = [
    types.Tool(name="echo", input_schema=_TEXT_IN, output_schema=_TEXT_OUT),
    types.Tool(name="stall", input_schema=_WAIT_IN, output_schema=_TEXT_OUT),
    types.Tool(name="wedge", input_schema=_WAIT_IN, output_schema=_TEXT_OUT),
    types.Tool(name="linger", input_schema=_WAIT_IN, output_schema=_TEXT_OUT),
]


def build(*, die_on_list: bool = False, cancelled_log: str | None = None) -> Server[Any]:
    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        if die_on_list:
            os._exit(3)
        return types.ListToolsResult(tools=_TOOLS)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        seconds = float(arguments.get("seconds", 0))
        if params.name == "stall":
            await anyio.to_thread.run_sync(time.sleep, seconds)
        elif params.name == "wedge":
            time.sleep(seconds)  # noqa: ASYNC251 - on purpose: the whole server stops
        elif params.name == "linger":
            try:
                await anyio.sleep(seconds)
            except anyio.get_cancelled_exc_class():
                if cancelled_log is not None:
                    with open(cancelled_log, "a", encoding="utf-8") as log:  # noqa: ASYNC230
                        log.write("cancelled linger\n")
                raise
        value = {"echo": str(arguments.get("text", params.name))}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(value))],
            structured_content=value,
        )

    return Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)


async def _main() -> None:
    logged = sys.argv.index("--cancelled-log") + 1 if "--cancelled-log" in sys.argv else None
    server = build(
        die_on_list="--die-on-list" in sys.argv,
        cancelled_log=sys.argv[logged] if logged is not None else None,
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if "--slow-start" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--slow-start") + 1]))
    anyio.run(_main)
