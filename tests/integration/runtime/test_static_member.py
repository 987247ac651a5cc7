"""Static group membership (KIP-345, ``HERMES_RUNTIME_INSTANCE_ID``) on Apache Kafka.

A worker named ``worker-1`` is killed with SIGKILL mid-stream and started again under the
same name. Its session timeout is 90 s: a dynamic member's restart would wait for the
dead member to time out before the group could hand it the partitions. The static one
takes them back as it rejoins and finishes the stream well inside that time; nothing is
lost, nothing applied twice, order kept. (The embedded broker holds every join for half
the session timeout, so this runs on Apache Kafka; ``bench/restarts.py`` measures both.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .support import IN, applied, open_store, produce, provision, turn, until_applied
from .test_crash import ROOT, check_everything_once_in_order

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

SESSION_MS = 90_000
"""A dead member of the group is waited for this long, unless it is static and comes back."""


def _worker(bootstrap: str, prefix: str, spec: str, group: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "WORKER_GROUP": group,
        "HERMES_RUNTIME_INSTANCE_ID": "worker-1",
        "HERMES_RUNTIME_SESSION_TIMEOUT_MS": str(SESSION_MS),
        "HERMES_RUNTIME_HEARTBEAT_INTERVAL_MS": "3000",
    }
    command = [sys.executable, "-m", "tests.integration.runtime.worker", bootstrap, prefix, spec]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, text=True, env=env)


async def test_a_static_member_killed_and_restarted_takes_its_partitions_back(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    prefix, group = f"static{unique}.", f"static-{unique}"
    await provision(kafka_bootstrap, prefix)
    sessions, per = 60, 20
    await produce(
        kafka_bootstrap,
        prefix + IN,
        [turn(f"s{s:03d}", q) for q in range(per) for s in range(sessions)],
    )
    spec = f"sqlite:{tmp_path / 'state.sqlite3'}"
    async with open_store(spec) as store:
        worker = _worker(kafka_bootstrap, prefix, spec, group)
        try:
            await until_applied(store, "crash", sessions, sessions * per // 4, within_s=120)
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            killed_at = await applied(store, "crash", sessions)
            assert 0 < killed_at < sessions * per, "the kill did not land mid-stream"

            worker = _worker(kafka_bootstrap, prefix, spec, group)
            restarted = time.monotonic()
            half_a_session = SESSION_MS / 1000 / 2
            done = await until_applied(
                store, "crash", sessions, sessions * per, within_s=half_a_session
            )
            took = time.monotonic() - restarted
            print(f"restarted static member: {done - killed_at} records in {took:.1f} s")
            assert done == sessions * per, (
                f"{done} of {sessions * per} applied {half_a_session:g} s after the restart: "
                "the group waited for the dead member"
            )
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
        await check_everything_once_in_order(
            kafka_bootstrap, prefix, store, name="crash", sessions=sessions, per=per
        )
