"""The bus's runtime on a three-broker Apache Kafka cluster (``deploy/local/kafka-cluster.sh``,
one for this module): topics with three replicas and ``min.insync.replicas=2``, producers
with ``acks=all``.

Two worker processes of one group apply 30 sessions x 40 ordered turns while a node is
killed with SIGKILL and started again (a hard bounce), then another is stopped with SIGTERM
(a clean bounce: a controlled shutdown moves its leaderships) and started again; input keeps
being written through each fault. Nothing is lost, every session is applied in order, once
(the state counts each turn once); in exactly-once mode the committed output holds each
reply exactly once, in at-least-once mode at least once. The anchor is Kafka's own
``transactions_test.py`` (a copier under hard and clean broker bounces).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from hermesbus import Envelope
from hermesbus.codec import decode, encode
from hermesbus.compose.acls import COMPONENTS, bus_acls
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.acls import Acl, create_acls
from hermesbus.connectors.kafka.groups import committed
from hermesbus.demo.expense import DEMO_USER
from hermesbus.errors import BrokerError
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.processors.tool.demo import demo_keys
from hermesbus.processors.tool.demo.fixtures import DEMO_DEPT
from hermesbus.runtime import CLOSE_TIMEOUT_S, StateStore
from hermesbus.topics import Catalog
from tests import signing
from tests.cli_process import Background, Ran, clean_env, hermesbus
from tests.integration.fleet.support import READY, START_S
from tests.integration.runtime.support import IN, OUT, counts, open_store, turn, until_applied

from .cluster import ADMIN, Cluster, in_sync, leaders, start

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1200)]

SESSIONS, PER = 30, 40
APPLY_S = 300.0
"""How long the workers may take to apply a slice of the input, through a fault."""
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module: PLAINTEXT listeners for the bounce tests, SASL_SSL ones
    with a SCRAM user per component (and ACLs enforced there) for the secure tests."""
    yield from start(tmp_path_factory.mktemp("cluster"), users=COMPONENTS)


async def _provision(bootstrap: str, prefix: str) -> None:
    """The catalog's topics with three replicas (and so ``min.insync.replicas=2``)."""
    catalog = Catalog.load().with_overrides(prefix=prefix, replication_factor=3)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.create(catalog.topics)
        for _ in range(300):  # every node's metadata has it soon after the controller
            if made := (await admin.describe([prefix + IN])).get(prefix + IN):
                break
            await asyncio.sleep(0.1)
    assert made is not None, f"{prefix + IN} was made, but no node describes it"
    configs = made.configs or {}
    assert made.replication_factor == 3, made
    assert configs["min.insync.replicas"] == "2", configs


async def _produce(bootstrap: str, topic: str, envelopes: Sequence[Envelope]) -> None:
    """Write as an app does, but acknowledged by every in-sync replica, idempotently:
    retried through a leader's loss, never lost, never doubled."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = []
        for envelope in envelopes:
            key, value = envelope.session_id.encode(), encode(envelope)
            headers = signing.signed(topic, key, value, identity="app")
            sent.append(await producer.send(topic, value, key=key, headers=headers))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def _worker(bootstrap: str, prefix: str, spec: str, log: Path, **env: str) -> subprocess.Popen[str]:
    """A worker process (``tests.integration.runtime.worker``) given ``env`` (its group,
    ``WORKER_GROUP``, and runtime settings); its stdout in ``log``.out, its stderr (aiokafka's
    complaints while a node is away) in ``log``."""
    environ = {**os.environ, "PYTHONWARNINGS": "ignore", **env}
    command = [sys.executable, "-m", "tests.integration.runtime.worker", bootstrap, prefix, spec]
    with log.open("w") as err, log.with_suffix(".out").open("w") as out:
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, text=True, env=environ)


async def _output(bootstrap: str, topic: str, isolation: str, until: int) -> list[Envelope]:
    """Every record of ``topic`` as ``isolation`` reads it, once ``until`` distinct ids came
    (then two quiet seconds more)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation
    )
    await consumer.start()
    found: list[Envelope] = []
    try:
        deadline = time.monotonic() + APPLY_S
        quiet_until = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=250)
            found += [decode(r.value or b"") for part in batch.values() for r in part]
            if quiet_until is None and len({e.message_id for e in found}) >= until:
                quiet_until = time.monotonic() + 2.0
            if quiet_until is not None and time.monotonic() >= quiet_until:
                break
    finally:
        await consumer.stop()
    return found


async def _bounces(
    cluster: Cluster, store: StateStore, prefix: str, turns: Sequence[Envelope]
) -> tuple[list[str], set[int]]:
    """Write a third of ``turns`` before each fault and let the workers apply through it:
    node 2 killed and restarted, node 1 stopped and restarted. The faults made; the
    partitions of the input whose leader moved."""
    boot, topic, third = cluster.bootstrap, prefix + IN, len(turns) // 3
    faults: list[str] = []
    moved: set[int] = set()
    await _produce(boot, topic, turns[:third])
    assert await until_applied(store, "crash", SESSIONS, 100, within_s=APPLY_S) >= 100

    before = await leaders(boot, topic)
    await asyncio.to_thread(cluster.kill, 2)  # hard bounce
    faults.append("SIGKILL node 2")
    await _produce(boot, topic, turns[third : 2 * third])  # the two replicas in sync take it
    after = await leaders(boot, topic)
    assert 2 not in after.values(), after
    moved |= {p for p, node in before.items() if node != after[p]}
    half = third + third // 2
    assert await until_applied(store, "crash", SESSIONS, half, within_s=APPLY_S) >= half
    await asyncio.to_thread(cluster.restart, 2)
    faults.append("restarted node 2")
    await in_sync(boot, APPLY_S)  # caught up before the next fault

    before = await leaders(boot, topic)
    await asyncio.to_thread(cluster.halt, 1)  # clean bounce: its leaderships move first
    faults.append("SIGTERM node 1")
    after = await leaders(boot, topic)
    assert 1 not in after.values(), after
    moved |= {p for p, node in before.items() if node != after[p]}
    await _produce(boot, topic, turns[2 * third :])
    await asyncio.to_thread(cluster.restart, 1)
    faults.append("restarted node 1")
    await in_sync(boot, APPLY_S)  # the next test starts on a whole cluster
    done = await until_applied(store, "crash", SESSIONS, len(turns), within_s=APPLY_S)
    assert done == len(turns)
    return faults, moved


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
async def test_hard_and_clean_broker_bounces_lose_nothing_and_keep_each_session_in_order(
    cluster: Cluster, mode: str, unique: str, tmp_path: Path
) -> None:
    eos = mode == "exactly-once"
    prefix, group = f"bounce{'e' if eos else 'a'}{unique}.", f"bounce-{mode}-{unique}"
    boot = cluster.bootstrap
    await _provision(boot, prefix)
    turns = [turn(f"s{s:03d}", q) for q in range(PER) for s in range(SESSIONS)]
    total = len(turns)
    spec = f"sqlite:{tmp_path / 'state.sqlite3'}"
    logs = [tmp_path / f"worker-{n}.err" for n in range(2)]
    settings = {"WORKER_GROUP": group, "HERMES_RUNTIME_EXACTLY_ONCE": str(eos).lower()}
    workers = [_worker(boot, prefix, spec, log, **settings) for log in logs]
    try:
        async with open_store(spec) as store:
            faults, moved = await _bounces(cluster, store, prefix, turns)
            states = await counts(store, "crash", SESSIONS)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(60) for worker in workers]
    assert codes == [0, 0], [log.read_text()[-3000:] for log in logs]
    assert moved, "no partition's leader moved"
    # the state: each session applied in order, each turn once
    assert states == [{"last": PER - 1, "count": PER, "violations": 0}] * SESSIONS
    # the output: every reply, in each session's order, once when exactly-once
    out = await _output(boot, prefix + OUT, "read_committed" if eos else "read_uncommitted", total)
    copies = Counter(e.message_id for e in out)
    assert len(copies) == total
    if eos:
        assert max(copies.values()) == 1, copies.most_common(3)
    first: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for envelope in out:
        if envelope.message_id not in seen:
            seen.add(envelope.message_id)
            first[envelope.session_id].append(int(envelope.payload.body.text))  # type: ignore[union-attr]
    assert all(seqs == list(range(PER)) for seqs in first.values()), first
    print(
        f"\ncluster bounces ({mode}): {SESSIONS} sessions, {total} turns, {len(out)} replies"
        f" read ({len(out) - total} copies); leaders moved on {len(moved)} of 6 partitions;"
        f" faults: {', '.join(faults)}"
    )


REVOKE_MS = 3_000
EXIT_BUDGET_S = REVOKE_MS / 1000 + 4 * CLOSE_TIMEOUT_S + 5.0
"""The revoke timeout, then a bounded last commit and close for each client, and the
interpreter's exit (a generous allowance for a busy machine)."""


async def _stuck_record(bootstrap: str, topic: str) -> RecordMetadata:
    """Ten sessions' turns, then the ``stuck`` session's first turn (where it is on the log),
    then three more of it behind."""
    await _produce(bootstrap, topic, [turn(f"s{s:03d}", q) for q in range(5) for s in range(10)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        key, value = b"stuck", encode(turn("stuck", 0))
        headers = signing.signed(topic, key, value, identity="app")
        at = await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()
    await _produce(bootstrap, topic, [turn("stuck", q) for q in range(1, 4)])
    return at


async def _offsets_settled(
    kafka: KafkaConfig, group: str, topic: str, partition: int
) -> list[int | None]:
    """Every read of the group's offset on ``partition`` until three in a row agree.

    Right after the whole cluster was killed and restarted, the group's coordinator
    answered OffsetFetch with no offsets (-1, no error) for about a second, then with
    older ones, then with the last: each read is kept, so none may be past what was
    processed."""
    seen: list[int | None] = []
    deadline = time.monotonic() + APPLY_S
    while len(seen) < 3 or len(set(seen[-3:])) > 1:
        assert time.monotonic() < deadline, f"the group's offsets never settled: {seen}"
        try:
            seen.append((await committed(kafka, group, topic)).get(partition))
        except BrokerError:  # the restarted cluster does not describe the topic yet
            pass
        await asyncio.sleep(0.5)
    return seen


async def _said(path: Path, text: str) -> None:
    """Wait until the worker's output holds ``text`` (a file: nothing to await but time)."""
    deadline = time.monotonic() + APPLY_S
    while text not in (said := await asyncio.to_thread(path.read_text)):
        assert time.monotonic() < deadline, said
        await asyncio.sleep(0.1)


async def _stuck_worker(
    boot: str, prefix: str, spec: str, log: Path, at: RecordMetadata, **settings: str
) -> subprocess.Popen[str]:
    """A worker that never finishes the stuck session's turns, once it has finished every
    other session's (100 turns) and its group committed up to the stuck record."""
    worker = _worker(boot, prefix, spec, log, WORKER_STUCK="stuck", **settings)
    async with open_store(spec) as store:
        assert await until_applied(store, "crash", 10, 100, within_s=APPLY_S) == 100
    await _said(log.with_suffix(".out"), "stuck at stuck-m0")
    kafka, group = KafkaConfig(bootstrap=boot), settings["WORKER_GROUP"]
    deadline = time.monotonic() + APPLY_S
    while (await committed(kafka, group, prefix + IN)).get(at.partition) != at.offset:
        assert time.monotonic() < deadline, "the finished prefix was never committed"
        await asyncio.sleep(0.2)
    return worker


async def _sigterm(worker: subprocess.Popen[str], log: Path) -> float:
    """SIGTERM; how long it took to exit (0, or the test fails with its log)."""
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(worker.wait, EXIT_BUDGET_S + 30)
    took = time.monotonic() - started
    if code != 0:
        pytest.fail(f"exit {code}: {(await asyncio.to_thread(log.read_text))[-3000:]}")
    assert took < EXIT_BUDGET_S, f"exited {took:.1f} s after SIGTERM"
    return took


async def test_sigterm_with_every_broker_gone_exits_in_time_and_commits_nothing_unprocessed(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    """Point 7: a worker with a record in flight that never finishes; every other session's
    turns finished, on its partition too, before and after it. SIGTERM with the cluster up:
    it exits in time and its last commit is the stuck record's offset, not past it. Again
    with every node of the cluster killed first: it exits within the revoke timeout and its
    clients' close budgets, and once the cluster is back the offset is still the stuck
    record's. The next worker applies it and the turns behind it."""
    prefix, group, boot = f"gone{unique}.", f"gone-{unique}", cluster.bootstrap
    await _provision(boot, prefix)
    at = await _stuck_record(boot, prefix + IN)
    await _produce(
        boot, prefix + IN, [turn(f"s{s:03d}", q) for q in range(5, 10) for s in range(10)]
    )
    spec = f"sqlite:{tmp_path / 'state.sqlite3'}"
    settings = {"WORKER_GROUP": group, "HERMES_RUNTIME_REVOKE_TIMEOUT_MS": str(REVOKE_MS)}
    kafka = KafkaConfig(bootstrap=boot)

    log = tmp_path / "up.err"  # the cluster up
    worker = await _stuck_worker(boot, prefix, spec, log, at, **settings)
    try:
        took_up = await _sigterm(worker, log)
    finally:
        worker.kill()
    after_up = (await committed(kafka, group, prefix + IN)).get(at.partition)
    assert after_up == at.offset, f"committed {after_up}; the stuck record is at {at.offset}"

    log = tmp_path / "gone.err"  # every broker gone
    worker = await _stuck_worker(boot, prefix, spec, log, at, **settings)
    try:
        for node in (1, 2, 3):
            await asyncio.to_thread(cluster.kill, node)
        took = await _sigterm(worker, log)
    finally:
        worker.kill()
        await asyncio.gather(*(asyncio.to_thread(cluster.restart, n) for n in (1, 2, 3)))
    seen = await _offsets_settled(kafka, group, prefix + IN, at.partition)
    assert all(o is None or o <= at.offset for o in seen), f"committed past {at.offset}: {seen}"
    assert seen[-1] == at.offset, f"committed {seen[-1]}; the stuck record is at {at.offset}"
    await in_sync(boot, APPLY_S)

    # the next worker of the group applies what was handed back, in order
    again = _worker(boot, prefix, spec, tmp_path / "next.err", **settings)
    try:
        async with open_store(spec) as store:
            deadline = time.monotonic() + APPLY_S
            while (state := dict((await store.load("crash", "stuck")).data)).get("count") != 4:
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
    finally:
        again.send_signal(signal.SIGTERM)
        await asyncio.to_thread(again.wait, 60)
    assert state == {"last": 3, "count": 4, "violations": 0}
    print(
        f"\nSIGTERM with a record stuck: exited in {took_up:.1f} s with the cluster up, in"
        f" {took:.1f} s with every broker gone (revoke timeout {REVOKE_MS / 1000:g} s);"
        f" committed {at.offset} on partition {at.partition} both times, the stuck record's"
        f" (read {seen} after the restart); the next worker applied its 4 turns"
    )


# -- secure Kafka: SASL/SCRAM-SHA-512 over TLS, one principal per component, ACLs ---------

SAY_S = 90.0


def _as(
    cluster: Cluster, user: str, home: Path, password: str | None = None, **more: str
) -> dict[str, str]:
    """The environment of a hermesbus command logging in as ``user``."""
    keys = {KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]}
    return clean_env(home, **keys, **cluster.env(user, password), **more)


async def _cli(env: dict[str, str], cwd: Path, *args: str) -> Ran:
    return await asyncio.to_thread(hermesbus, *args, env=env, cwd=cwd, timeout=SAY_S + 60)


async def _secure_topics(cluster: Cluster, prefix: str, tmp_path: Path) -> None:
    """The bus's topics, made by the admin principal as an operator would."""
    made = await _cli(
        _as(cluster, ADMIN, tmp_path / "admin"), tmp_path,
        "topics", "apply", "--prefix", prefix, "--replication-factor", "3",
    )  # fmt: skip
    assert made.code == 0, made.output


async def test_a_wrong_password_is_refused_naming_the_principal(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    wrong = secrets.token_urlsafe(12)
    said = await _cli(
        _as(cluster, "app", tmp_path / "app", password=wrong), tmp_path,
        "say", f"s-{unique}", "hello", "--prefix", f"pw{unique}.", "--timeout", "5",
    )  # fmt: skip
    assert said.code == 1, said.output
    assert "the cluster refused the login of User:app (SCRAM-SHA-512" in said.err
    assert "HERMES_KAFKA_SASL_PASSWORD" in said.err and wrong not in said.output
    assert "Traceback" not in said.err


async def test_a_missing_acl_is_refused_naming_the_principal_and_the_resource(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    prefix = f"noacl{unique}."
    await _secure_topics(cluster, prefix, tmp_path)
    # no ACL at all: the topics are hidden from the app, and from a processor
    said = await _cli(
        _as(cluster, "app", tmp_path / "app"), tmp_path,
        "say", f"s-{unique}", "hello", "--prefix", prefix, "--timeout", "5",
    )  # fmt: skip
    assert said.code == 1, said.output
    assert (
        f"does not let User:app use the topics {prefix}hermes.conversation.in, "
        f"{prefix}hermes.conversation.out: no ACL allows it" in said.err
    ), said.err
    assert "hermesbus acls" in said.err and "Traceback" not in said.err
    ran = await _cli(
        _as(cluster, "memory", tmp_path / "memory"), tmp_path, "run", "memory", "--prefix", prefix
    )
    assert ran.code == 1, ran.output
    assert "does not let User:memory use the topics" in ran.err and "Traceback" not in ran.err
    # every ACL of the bus but the app's Write on the ingress topic: it may see it, not write
    acls = [
        acl
        for acl in bus_acls(prefix)
        if not (acl.principal == "User:app" and acl.operation == "Write")
    ]
    async with KafkaAdmin(KafkaConfig(**_config(cluster, ADMIN))) as admin:
        await create_acls(admin.client, [*acls, Acl("User:app", "topic", prefix + IN, "Describe")])
    said = await _cli(
        _as(cluster, "app", tmp_path / "app"), tmp_path,
        "say", f"s-{unique}", "hello", "--prefix", prefix, "--timeout", "5",
    )  # fmt: skip
    assert said.code == 1, said.output
    assert f"does not let User:app write {prefix}hermes.conversation.in" in said.err, said.err


def _config(cluster: Cluster, user: str) -> dict[str, str]:
    """KafkaConfig's fields of ``user``'s login."""
    return {k.removeprefix("HERMES_KAFKA_").lower(): v for k, v in cluster.env(user).items()}


async def test_the_demo_runs_end_to_end_under_acls_one_principal_per_processor(
    cluster: Cluster, redis_url: str, unique: str, tmp_path: Path
) -> None:
    """The operator makes the topics and applies exactly what ``hermesbus acls`` prints;
    each processor runs apart as its own principal; an app's turn gets the demo's answer."""
    prefix = f"acl{unique}."
    await _secure_topics(cluster, prefix, tmp_path)
    admin = _as(cluster, ADMIN, tmp_path / "admin")
    applied = await _cli(admin, tmp_path, "acls", "--prefix", prefix, "--apply")
    assert applied.code == 0, applied.output
    assert f"added {len(bus_acls(prefix))} ACLs for 7 principals" in applied.out
    stores = {
        "HERMES_REDIS_URL": redis_url,
        "HERMES_REDIS_PREFIX": f"acl{unique}",
        "HERMES_CONVERSATION_BUDGET_SCALE": "6",
    }
    registered = await _cli(
        _as(cluster, "tool", tmp_path / "registrar", **stores),
        tmp_path,
        "tools",
        "register",
        "--demo",
    )
    assert registered.code == 0, registered.output
    fleet = []
    try:
        for processor in ("conversation", "dispatcher", "tool", "memory"):
            more = {**stores, **(demo_keys() if processor == "tool" else {})}
            env = _as(cluster, processor, tmp_path / processor, **more)
            fleet.append(
                Background(tmp_path, "run", processor, "--prefix", prefix, env=env, name=processor)
            )
        for running in fleet:
            await asyncio.to_thread(running.wait_for, READY, START_S)
        said = await _cli(
            _as(cluster, "app", tmp_path / "app"), tmp_path,
            "say", f"s-{unique}", "我要报上个月去深圳的差旅费", "--user", DEMO_USER,
            "--prefix", prefix, "--timeout", str(SAY_S),
        )  # fmt: skip
        assert said.code == 0, said.output + "".join(r.stderr()[-2000:] for r in fleet)
        (answer,) = said.out.splitlines()
        assert f"您所在部门：{DEMO_DEPT}" in answer and answer.endswith("(conversation:S2)")
        for running in fleet:
            running.process.send_signal(signal.SIGTERM)
        codes = [await asyncio.to_thread(r.process.wait, 60) for r in fleet]
    finally:
        for running in fleet:
            running.kill()
    logs = {r.err.stem: r.stderr() for r in fleet}
    assert codes == [0, 0, 0, 0], logs
    refused = {name: log for name, log in logs.items() if "uthoriz" in log or "not let" in log}
    assert refused == {}, refused
    print(
        f"\nsecure demo: {len(bus_acls(prefix))} ACLs for 7 principals; four processes, each"
        " its own SCRAM principal over TLS; the app's turn answered by org_tool"
    )
