"""MCP tool calls through the tool processor against the SDK's own client, same server, same run.

The demo MCP server (``processors/tool/demo/mcp_server.py``) answers ``org_tool`` (a directory
lookup, signed with Ed25519). Two callers call it with the same arguments:

* ``sdk``: the ``mcp`` SDK's ``ClientSession.call_tool``, nothing else (the baseline);
* ``hermesbus``: ``ToolService.call``, what the tool processor runs for each ``ToolCall``:
  the arguments checked against the pinned input schema, the definition compared with its
  pin (the server's list read again every ``HERMES_MCP_RELIST_S``, 2 s), the call, the
  signature, the output schema and the verifier (in the tool's verifier worker), the size
  cap, the idempotency record and the call sample in the tool store (SQLite).

Both run in rounds, interleaved so that machine noise hits them alike; a round makes
``--calls`` calls with ``--concurrency`` in flight. The best round of each counts. Printed:
calls per second, p50 and p99 per call, and hermesbus/sdk (goal: at least 0.7), over
streamable HTTP (one server process both talk to) and over stdio (each caller's own server
process, the same program).

    .venv/bin/python bench/mcp.py [--calls 400] [--concurrency 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]  # run as a script, this file's folder would shadow the `mcp` package

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.contract.payloads import ToolCall
from hermesbus.processors.tool import McpServer, ToolService, ToolSettings
from hermesbus.processors.tool.demo import demo_keys, demo_mcp_document, demo_mcp_server
from hermesbus.processors.tool.demo.fixtures import DEMO_USER_ID

GOAL = 0.7
ARGUMENTS = {"user_id": DEMO_USER_ID}
NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
SERVER = [sys.executable, "-m", "hermesbus.processors.tool.demo.mcp_server"]

Call = Callable[[int], Awaitable[None]]


_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _tree_cpu_ms() -> float:
    """CPU time (user + system, ms) used so far by this process and every live process
    under it: the callers, the servers, the verifier workers (all started from here)."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rpartition(b")")[2].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) * _TICK_MS
    mine, total = {os.getpid()}, 0.0
    for pid in sorted(parents):  # a child's pid is (almost always) above its parent's
        if pid in mine or parents[pid] in mine:
            mine.add(pid)
            total += used[pid]
    return total


async def _round(call: Call, calls: int, concurrency: int) -> tuple[float, list[float], float]:
    """Calls per second, each call's latency (ms) and the CPU ms per call (of every
    process taking part), ``concurrency`` at a time."""
    latencies: list[float] = []
    queue = iter(range(calls))

    async def worker() -> None:
        for n in queue:
            start = time.perf_counter()
            await call(n)
            latencies.append((time.perf_counter() - start) * 1000)

    cpu = _tree_cpu_ms()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rate = calls / (time.perf_counter() - start)
    return rate, latencies, (_tree_cpu_ms() - cpu) / calls


def _sdk(session: ClientSession) -> Call:
    async def call(_: int) -> None:
        result = await session.call_tool("org_tool", ARGUMENTS)
        if result.is_error:
            raise RuntimeError(f"the SDK's call failed: {result.content}")

    return call


def _hermes(tools: ToolService, tag: str) -> Call:
    async def call(n: int) -> None:
        arguments = json.dumps(ARGUMENTS)
        key = f"bench-{tag}-{n}-{time.perf_counter_ns()}"  # a new call each time, never a replay
        report = await tools.call(
            ToolCall(tool="org_tool", arguments_json=arguments, idempotency_key=key), now=NOW
        )
        if report.result.status_code != 200 or report.result.fallback is not None:
            raise RuntimeError(f"the tool processor's call failed: {report.result.error}")

    return call


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            raise SystemExit("the demo MCP server exited before it listened")
        time.sleep(0.1)
    raise SystemExit("the demo MCP server did not listen within 60 s")


async def _compare(
    transport: str, environ: dict[str, str], home: Path, args: argparse.Namespace
) -> list[tuple[str, float, float, float, float]]:
    async with AsyncExitStack() as stack:
        if transport == "http":
            url = f"http://127.0.0.1:{args.port}/mcp"
            read, write = await stack.enter_async_context(streamable_http_client(url))
            server = McpServer(name="bench_http", transport="http", url=url)
        else:
            params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=environ)
            read, write = await stack.enter_async_context(stdio_client(params))
            server = demo_mcp_server()
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        settings = ToolSettings(home=home / transport)
        store = SqliteToolStore(settings=settings, book=MarkBook(settings.home))
        tools = await stack.enter_async_context(ToolService(store, settings, environ=environ))
        await tools.register_mcp(demo_mcp_document(), server)
        contenders = {"sdk": _sdk(session), "hermesbus": _hermes(tools, transport)}
        for call in contenders.values():  # warm: sessions open, workers started
            await _round(call, 20, args.concurrency)
        best: dict[str, tuple[float, list[float], float]] = {}
        for _ in range(args.rounds):
            for name, call in contenders.items():
                measured = await _round(call, args.calls, args.concurrency)
                if name not in best or measured[0] > best[name][0]:
                    best[name] = measured
    rows = []
    for name, (rate, latencies, cpu) in best.items():
        quantiles = statistics.quantiles(latencies, n=100)
        rows.append((name, rate, statistics.median(latencies), quantiles[98], cpu))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    environ = {**os.environ, **demo_keys()}
    args.port = _free_port()
    with tempfile.TemporaryDirectory() as tmp, Path(tmp, "server.log").open("wb") as log:
        server = subprocess.Popen(  # noqa: S603 - this interpreter, fixed arguments
            [*SERVER, "--port", str(args.port)], env=environ, stdout=log, stderr=log
        )
        try:
            _wait_for(args.port, server)
            results = {
                transport: asyncio.run(_compare(transport, environ, Path(tmp), args))
                for transport in ("http", "stdio")
            }
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(
        f"org_tool over MCP: {args.calls} calls a round, {args.concurrency} in flight, "
        f"best of {args.rounds} rounds"
    )
    print(
        f"{'transport':<10} {'caller':<10} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'cpu ms':>7} {'ratio':>6}"
    )
    short = False
    for transport, rows in results.items():
        baseline = next(row[1] for row in rows if row[0] == "sdk")
        for name, rate, p50, p99, cpu in rows:
            ratio = rate / baseline
            print(
                f"{transport:<10} {name:<10} {rate:>9.0f} {p50:>8.2f} {p99:>8.2f} "
                f"{cpu:>7.2f} {ratio:>6.2f}"
            )
            short = short or (name == "hermesbus" and ratio < GOAL)
    print(f"cpu ms: CPU per call of every process taking part ({os.cpu_count()} cores here)")
    print(f"goal: hermesbus/sdk >= {GOAL}: " + ("WARNING, below it" if short else "ok"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
