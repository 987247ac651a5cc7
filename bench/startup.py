"""Start-up of ``hermesbus up``: seconds from launching it to the first reply of a ``Client.ask``.

For each broker, ``--runs`` times: ``hermesbus up --demo`` starts in a fresh HERMES_HOME, and
each start-up step it prints is timed as it arrives. As soon as it says its topics are
ready, an app asks the demo's first turn ("我要报上个月去深圳的差旅费", as the demo's user,
in a session of its own); the figure is the time from launching ``up`` to that reply
(org_tool and finance_tool answer it, through the dispatcher and memory). The demo's own
conversations start at the same moment, so the ask shares the processors with them, as
an app would on a live bus.

Baseline, measured against the same broker in the same run: a Kafka Metadata round trip
(a new TCP connection, one Metadata request, its answer; the median of 20). The ratio says
how many such round trips start-up costs.

Brokers: the embedded one (``up`` with nothing configured starts tansu itself), and Apache
Kafka at ``--kafka HOST:PORT``; without it, one started with ``deploy/local/kafka.sh`` when
java and mvn exist (``--no-kafka`` skips it). On Kafka, ``up`` gets a keyring made by
``hermesbus keys init`` and a topic prefix of its own, whose topics are deleted at the end.

    python bench/startup.py [--runs 3] [--kafka HOST:PORT | --no-kafka]

Target: the first reply under 5 s on the embedded broker. Exits 0 unless a run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from hermesbus import Client
from hermesbus.compose.broker import metadata_probe
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.demo.expense import DEMO_USER, reply_text
from hermesbus.errors import HermesError
from hermesbus.identity import Keyring
from hermesbus.topics import Catalog

ROOT = Path(__file__).resolve().parent.parent
CLI = (sys.executable, "-m", "hermesbus.cli")
FIRST_TURN = "我要报上个月去深圳的差旅费"
TARGET_S = 5.0
"""The embedded broker's goal for the first reply."""
STEPS = ("broker up", "topics ready", "tools ready", "conversation joined", "ready")
"""Start-up steps up prints, in order; each is timed when its line arrives."""
ROUND_TRIPS = 20
ASK_TIMEOUT_S = 90.0
STOP_S = 30.0


@dataclass
class Run:
    """One start of ``up``: when each step was printed and when the ask was answered."""

    steps: dict[str, float] = field(default_factory=dict)
    demo_reply: float | None = None
    ask_reply: float | None = None
    reply: str = ""
    round_trip: float | None = None
    error: str | None = None
    demo_seen: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Broker:
    """Where ``up`` runs: ``bootstrap`` None means it starts the embedded broker itself."""

    name: str
    bootstrap: str | None


async def _lines(
    stream: asyncio.StreamReader, began: float, run: Run, seen: asyncio.Queue[str]
) -> None:
    """Time every line of ``up``'s output; the step lines go to ``seen``."""
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip("\n")
        at = time.monotonic() - began
        said = text.split("s  ", 1)[-1] if text.lstrip()[:1].isdigit() else text
        for step in STEPS:
            if step not in run.steps and (said == step or said.startswith(step + ":")):
                run.steps[step] = at
                await seen.put(said)
        if text.startswith("hermes ") and run.demo_reply is None:
            run.demo_reply = at
            run.demo_seen.set()


async def _step(seen: asyncio.Queue[str], step: str) -> str:
    while True:
        said = await seen.get()
        if said.startswith(step):
            return said


async def once(broker: Broker, home: Path, keys: Path | None) -> Run:
    """Launch ``up --demo``, ask the first turn once its topics are ready, stop it."""
    run = Run()
    prefix = "" if broker.bootstrap is None else f"bench-startup-{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("HERMES_KAFKA_BOOTSTRAP", None)
    options = ["--demo"]
    if broker.bootstrap is not None:
        options += ["--bootstrap", broker.bootstrap, "--prefix", prefix]
    if keys is not None:
        env["HERMES_KEYS_FILE"] = str(keys)
    began = time.monotonic()
    up = await asyncio.create_subprocess_exec(
        *CLI, "up", *options, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    if up.stdout is None or up.stderr is None:
        raise RuntimeError("up's output is not piped")
    seen: asyncio.Queue[str] = asyncio.Queue()
    readers = [
        asyncio.create_task(_lines(up.stdout, began, run, seen)),
        asyncio.create_task(_lines(up.stderr, began, run, seen)),
    ]
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S):
            said = await _step(seen, "broker up")
            bootstrap = broker.bootstrap or said.rsplit(" at ", 1)[1].strip()
            await _step(seen, "topics ready")
            ring = Keyring.load(keys if keys is not None else home / "keys.json")
            async with Client(bootstrap=bootstrap, topic_prefix=prefix, keys=ring) as app:
                session = f"bench-startup-{uuid.uuid4().hex[:8]}"
                answer = await app.ask(session, DEMO_USER, FIRST_TURN, timeout=ASK_TIMEOUT_S)
            run.ask_reply = time.monotonic() - began
            run.reply = f"{answer.source}: {reply_text(answer)}"
            run.round_trip = await asyncio.to_thread(_round_trip, bootstrap)
            await run.demo_seen.wait()  # the demo's own first reply, if it came later
    except (TimeoutError, HermesError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        await _stop(up)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if broker.bootstrap is not None:
            await _drop_topics(broker.bootstrap, prefix)
    return run


def _round_trip(bootstrap: str) -> float:
    """The median seconds of a Metadata round trip on a new connection to ``bootstrap``."""
    host, port = bootstrap.rsplit(":", 1)
    times = []
    for _ in range(ROUND_TRIPS):
        began = time.perf_counter()
        if not metadata_probe(int(port), host=host):
            raise HermesError(f"the broker at {bootstrap} did not answer a Metadata request")
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def _stop(up: asyncio.subprocess.Process) -> None:
    if up.returncode is None:
        up.send_signal(signal.SIGINT)
    try:
        async with asyncio.timeout(STOP_S):
            await up.wait()
    except TimeoutError:
        up.kill()
        await up.wait()


async def _drop_topics(bootstrap: str, prefix: str) -> None:
    names = Catalog.load().with_overrides(prefix=prefix).names()
    with suppress(Exception):  # best effort: a left-over bench topic harms nothing
        async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
            await admin.client.delete_topics(names)


async def _command(*argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``argv``; its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


@asynccontextmanager
async def apache_kafka(given: str | None, wanted: bool) -> AsyncIterator[tuple[str | None, str]]:
    """Apache Kafka's bootstrap (None if it cannot be had) and where it came from."""
    bash = shutil.which("bash")
    if given or not wanted:
        yield given, ("given" if given else "skipped (--no-kafka)")
        return
    if not (shutil.which("java") and shutil.which("mvn") and bash):
        yield None, "skipped: no java/mvn here (pass --kafka HOST:PORT)"
        return
    run_dir = Path(tempfile.mkdtemp(prefix="hermesbus-bench-kafka-"))
    env = {**os.environ, "HERMES_KAFKA_RUN_DIR": str(run_dir)}
    script = str(ROOT / "deploy" / "local" / "kafka.sh")
    code, out, err = await _command(bash, script, "start", env=env)
    if code != 0:
        shutil.rmtree(run_dir, ignore_errors=True)
        yield None, f"skipped: deploy/local/kafka.sh start failed: {err.strip()[-300:]}"
        return
    try:
        yield out.strip().rsplit("=", 1)[1], "started by deploy/local/kafka.sh"
    finally:
        await _command(bash, script, "stop", env=env)
        shutil.rmtree(run_dir, ignore_errors=True)


async def measure(broker: Broker, runs: int) -> list[Run]:
    results = []
    for _ in range(runs):
        home = Path(tempfile.mkdtemp(prefix="hermesbus-bench-startup-"))
        keys = None
        try:
            if broker.bootstrap is not None:  # a configured broker: up wants shared keys
                keys = home / "keys.json"
                env = {**os.environ, "HERMES_HOME": str(home), "HERMES_KEYS_FILE": str(keys)}
                code, _out, err = await _command(*CLI, "keys", "init", env=env)
                if code != 0:
                    results.append(Run(error=f"keys init: {err.strip()}"))
                    continue
            results.append(await once(broker, home, keys))
        finally:
            shutil.rmtree(home, ignore_errors=True)
    return results


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(name: str, runs: list[Run]) -> bool:
    """Print one broker's medians; False if a run failed."""
    failed = [run.error for run in runs if run.error]
    for error in failed:
        print(f"  {name}: run failed: {error}")
    good = [run for run in runs if not run.error]
    if not good:
        return False
    row = [_median([run.steps.get(step) for run in good]) for step in STEPS]
    ask = _median([run.ask_reply for run in good])
    demo = _median([run.demo_reply for run in good])
    rtt = _median([run.round_trip for run in good])
    ratio = f"{ask / rtt:,.0f}x" if ask and rtt else "-"
    cells = [_s(v) for v in row] + [_s(demo), _s(ask), f"{rtt * 1000:.2f} ms" if rtt else "-"]
    print(f"{name:<14}" + "".join(f"{c:>13}" for c in cells) + f"{ratio:>12}")
    print(f"{'':<14}  first reply: {good[0].reply[:100]}")
    return not failed


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kafka", help="Apache Kafka's bootstrap; default: start one")
    parser.add_argument("--no-kafka", action="store_true", help="only the embedded broker")
    args = parser.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # new topics: retried "not leader"
    print(f"hermesbus up --demo, {args.runs} runs each; medians in seconds since launch")
    head = ["broker up", "topics", "tools", "joined", "ready", "demo reply", "ask reply", "rtt"]
    print(f"{'broker':<14}" + "".join(f"{h:>13}" for h in head) + f"{'ask/rtt':>12}")
    ok = True
    embedded = await measure(Broker("embedded", None), args.runs)
    ok = report("embedded", embedded) and ok
    ask = _median([run.ask_reply for run in embedded if not run.error])
    async with apache_kafka(args.kafka, not args.no_kafka) as (bootstrap, how):
        if bootstrap is None:
            print(f"{'apache kafka':<14}  {how}")
        else:
            kafka = await measure(Broker("apache kafka", bootstrap), args.runs)
            ok = report("apache kafka", kafka) and ok
    if ask is not None:
        verdict = "ok" if ask < TARGET_S else "WARNING: over the target"
        print(f"embedded first reply {ask:.2f} s (target < {TARGET_S:g} s): {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
