"""The Neo4j driver logs every notification the server sends, with its query: in a command's
logging a notification is one line per 30 s, however many queries draw it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.neo4j

QUERIES = 20


def test_twenty_queries_drawing_one_notification_log_one_line(neo4j_url: str, unique: str) -> None:
    label = f"NoSuchLabel{unique}"  # never made: each query draws "label does not exist"
    code = (
        "import asyncio\n"
        "from hermesbus.base.logs import configure\n"
        "from hermesbus.connectors.neo4j import Neo4jConfig, connect\n"
        "configure()\n"
        "async def main():\n"
        f"    async with connect(Neo4jConfig(url={neo4j_url!r})) as driver:\n"
        f"        for _ in range({QUERIES}):\n"
        f"            await driver.execute_query('MATCH (n:{label}) RETURN n')\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    notified = [line for line in lines if line.startswith("WARNING neo4j.notifications:")]
    assert len(notified) == 1, done.stderr
    assert label in notified[0]
    (summary,) = [line for line in lines if "were not logged" in line]
    assert summary.startswith(f"WARNING hermesbus.base.logs: {QUERIES - 1} more lines of "
                              "neo4j.notifications like 'Received notification")  # fmt: skip
    assert len(lines) == 2, done.stderr
