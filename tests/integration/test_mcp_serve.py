"""``hermesbus mcp serve`` listed and called through the SDK's own client, over stdio and
over streamable HTTP, against a bus the demo ran on the embedded broker (``mcp_demo``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.integration.demo_run import DemoRun
from tests.listening import listening

pytestmark = pytest.mark.kafka

TOOLS = {"trace", "session", "search", "tail", "replay_shadow", "flows_show"}
TOKEN = "test-token-for-mcp-serve"  # noqa: S105 - a test's own, for its own server


@pytest.fixture(scope="module")
def bus(mcp_demo: DemoRun) -> dict[str, str]:
    """The bus the demo left on the embedded broker (its tools served over MCP): its home,
    the broker, the prefix, and the environment the server is started with."""
    ran = mcp_demo.ran
    assert ran.returncode == 0, ran.stdout + ran.stderr
    where = {"home": str(mcp_demo.home), "bootstrap": mcp_demo.bootstrap}
    return {**where, "prefix": mcp_demo.prefix, **mcp_demo.env}


def _serve(bus: dict[str, str], *transport: str) -> list[str]:
    return [
        sys.executable, "-m", "hermesbus.cli", "mcp", "serve", *transport,
        "--home", bus["home"], "--bootstrap", bus["bootstrap"], "--prefix", bus["prefix"],
    ]  # fmt: skip


def _env(bus: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in bus.items() if k not in ("home", "bootstrap", "prefix")}


async def _exercise(session: ClientSession) -> dict[str, Any]:
    """List the tools and call each; what each answered (structured content)."""
    await session.initialize()
    listed = (await session.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    for tool in listed:  # read-only by design, each with an output schema
        assert tool.output_schema is not None, tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint, tool.name
        assert tool.annotations.destructive_hint is False, tool.name
    answers: dict[str, Any] = {}

    async def ask(name: str, **arguments: Any) -> Any:
        result = await session.call_tool(name, arguments)
        assert isinstance(result, types.CallToolResult)
        assert not result.is_error, result.content
        answers[name] = result.structured_content
        return result.structured_content

    found = await ask("search", component="conversation", outcome="success", limit=5)
    assert found["documents"]
    session_id = found["documents"][0]["gen_ai"]["conversation"]["id"]
    whole = await ask("session", session_id=session_id)
    assert {span["component"] for span in whole["spans"]} >= {"conversation", "dispatcher"}
    trace_id = whole["documents"][0]["trace"]["id"]
    traced = await ask("trace", trace_id=trace_id)
    assert traced["spans"] and all(d["trace"]["id"] == trace_id for d in traced["documents"])
    tailed = await ask("tail", session_id=session_id, limit=3)
    assert len(tailed["records"]) == 3 and tailed["more"] is True  # bounded
    assert all(r["key"] == session_id for r in tailed["records"])
    replayed = await ask("replay_shadow", sessions=[session_id])
    assert replayed["diverged"] is False and sum(replayed["compared"].values()) > 0
    shown = await ask("flows_show", flow="table_export")
    assert shown["version"] == 1 and any("->" in line for line in shown["diagram"])
    built_in = await ask("flows_show", flow="expense")
    assert built_in["registered"] == "built in"
    refused = await session.call_tool("trace", {"trace_id": "no-such-trace"})
    assert isinstance(refused, types.CallToolResult) and refused.is_error
    return answers


async def test_every_tool_over_stdio(bus: dict[str, str]) -> None:
    command = _serve(bus, "--stdio")
    params = StdioServerParameters(command=command[0], args=command[1:], env=_env(bus))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await _exercise(session)


@pytest.fixture
def http_port(bus: dict[str, str], tmp_path: Path) -> Iterator[int]:
    env = _env(bus) | {"HERMES_MCP_SERVE_TOKEN": TOKEN}
    with listening(
        lambda port: _serve(bus, "--port", str(port)), env, tmp_path / "serve.log"
    ) as port:
        yield port


async def test_every_tool_over_streamable_http(http_port: int) -> None:
    url = f"http://127.0.0.1:{http_port}/mcp"
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await _exercise(session)


async def test_http_needs_the_token(http_port: int) -> None:
    url = f"http://127.0.0.1:{http_port}/mcp"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        async with create_mcp_http_client(headers=headers) as client:
            answer = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert answer.status_code == 401


def test_port_refuses_to_serve_without_a_token(bus: dict[str, str]) -> None:
    ran = subprocess.run(
        _serve(bus, "--port", "1"), env=_env(bus), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert ran.returncode == 2 and "HERMES_MCP_SERVE_TOKEN" in ran.stderr
    assert "Traceback" not in ran.stderr
