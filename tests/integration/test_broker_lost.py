"""A broker that goes away, for real: the embedded one dies, a configured one is lost and back."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from hermesbus.compose.broker import BrokerWatch, EmbeddedBroker, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("broker_binary")]


async def _killed(broker: EmbeddedBroker) -> None:
    """SIGKILL the broker's process and wait until it is gone."""
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    while broker.running:  # a child process: nothing to wait on
        await asyncio.sleep(0.05)


async def test_died_says_how_the_embedded_broker_ended_and_where_its_log_is(
    tmp_path: Path,
) -> None:
    async with EmbeddedBroker(home=tmp_path) as broker:
        pid = broker.pid
        assert broker.exit_reason() is None
        died = asyncio.create_task(broker.died(poll_s=0.05))
        await asyncio.sleep(0.3)
        assert not died.done()
        await _killed(broker)
        said = await asyncio.wait_for(died, 5)
        assert broker.exit_reason() == "signal 9 (SIGKILL)"
    assert said.startswith(f"the embedded broker at 127.0.0.1:{broker.port} (tansu, pid {pid}, ")
    assert f"log {tmp_path / 'broker' / f'tansu-{broker.port}.log'})" in said
    assert "died: signal 9 (SIGKILL). Its topics and messages were in memory and are lost" in said


async def test_a_broker_that_stop_ends_has_not_died(tmp_path: Path) -> None:
    broker = EmbeddedBroker(home=tmp_path)
    died = asyncio.create_task(broker.died(poll_s=0.05))  # before the start: waits for one
    try:
        await asyncio.to_thread(broker.start)
        await asyncio.to_thread(broker.stop)
        await asyncio.sleep(0.3)
        assert not died.done()
    finally:
        died.cancel()
        await asyncio.gather(died, return_exceptions=True)
        broker.stop()


async def test_the_watch_reports_an_outage_once_then_periodically_then_its_end(
    tmp_path: Path,
) -> None:
    """A broker killed and started again on its port, as a configured one would come back."""
    port = free_port()
    lines: list[str] = []
    first = EmbeddedBroker(port, home=tmp_path)
    await asyncio.to_thread(first.start)
    watch = BrokerWatch(first.bootstrap, lines.append, report_s=0.5, timeout_s=1.0)
    again = EmbeddedBroker(port, home=tmp_path)
    try:
        await watch.check()
        assert (lines, watch.reachable) == ([], True)
        await _killed(first)
        await watch.check()
        await watch.check()  # not one line per failed probe
        assert len(lines) == 1 and not watch.reachable
        assert lines[0].startswith(f"the Kafka broker at {first.bootstrap} is unreachable (since ")
        await asyncio.sleep(0.6)
        await watch.check()
        assert len(lines) == 2
        assert lines[1].startswith(f"the Kafka broker at {first.bootstrap} is still unreachable")
        first.stop()
        await asyncio.to_thread(again.start)  # the same port: the old connections do not hold it
        await watch.check()
        assert watch.reachable
        assert lines[2].startswith(f"the Kafka broker at {first.bootstrap} is back after ")
    finally:
        first.stop()
        again.stop()
