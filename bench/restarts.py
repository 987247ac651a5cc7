"""Fault tolerance of ``hermesbus up``: demo sessions in flight across kill -9 restarts.

The broker outlives ``up``: an embedded one started here (tansu keeps its log in memory,
so it cannot be the one inside ``up``), or ``--bootstrap``. ``up --demo`` runs with a
HERMES_HOME, a keyring (``hermesbus keys init``) and a topic prefix of its own. Each
session says the first three turns of the demo's conversation A as DEMO_USER on the demo's
date, at most ``--concurrency`` sessions at a time; a turn's answer is the first
``conversation:*`` reply after it, which must be the demo's state (S2, S3.1, S4) and no
timeout, within ``--turn-timeout`` s. A turn is never sent twice: a lost message fails.
At 1/(R+1), 2/(R+1), ... of the turns, ``up`` and every process it started are killed
with SIGKILL and ``up`` is started again at once, same home, keys and prefix. A restart's
outage runs from the kill to the first reply produced after it.

Concurrency is 10 by default: the demo OCR takes 1 s per call in one worker, so N sessions
at a time put up to N s of OCR work behind one another at turn 2, against the dispatcher's
30 s cycle deadline. Without restarts, 40 sessions 10 or 20 at a time all completed; 30 at a
time, 30 of the 40 got the OCR timeout: that measures the OCR, not the restarts.

With ``--membership both`` (the default) the whole exercise runs twice, with dynamic group
members (Kafka's default: a restarted ``up`` waits for its dead members to time out) and
with static ones (``HERMES_RUNTIME_INSTANCE_ID``, KIP-345: the restarted members take
their partitions back), each with a home and prefix of its own, and the outages of the
two are compared (static/dynamic, same run).

    python bench/restarts.py [--sessions 200] [--restarts 3] [--bootstrap HOST:PORT]
                             [--membership dynamic|static|both]

Exits 0 only if all restarts happened and every session completed with no timeout reply.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus import Client, Envelope, Payload, UserTurn
from hermesbus.codec import default_codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.demo.expense import DEMO_START, DEMO_USER, Turn, conversations, reply_text
from hermesbus.errors import HermesError
from hermesbus.identity import Keyring
from hermesbus.topics import CONVERSATION_OUT, Catalog

CLI = (sys.executable, "-m", "hermesbus.cli")
SERVING = b"serving; Ctrl-C stops"
CYCLES_S = 2.0
"""How long after the sessions sent turn 2 the kill comes: its tool cycles (OCR, then the
validation; the long ones) are under way by then, calls dispatched and deadlines armed."""
TIMEOUT_MARKERS = ("暂时无法完成请求", "timeout", "超过30秒")
"""A reply saying one of these is a timeout or error report, whatever its state."""


@dataclass(frozen=True, slots=True)
class Expect:
    """The answer a turn must get: its state, and a phrase of that state's question."""

    source: str
    says: tuple[str, ...]

    def judge(self, reply: Envelope) -> str | None:
        """None if ``reply`` is this answer, else what is wrong with it."""
        text = reply_text(reply)
        if any(marker in text for marker in TIMEOUT_MARKERS):
            return "timeout reply"
        if reply.source != self.source or not any(s in text for s in self.says):
            return f"not the {self.source} answer"
        return None


EXPECTED = (
    Expect("conversation:S2", ("差旅报销",)),  # the budget, asking for the materials
    Expect("conversation:S3.1", ("是否重新上传", "默认接受")),  # review, or memory's candidate
    Expect("conversation:S4", ("报销单已校验通过",)),  # the summary to confirm
)
"""Turns 1-3 of demo conversation A, as tests/integration/test_demo.py sees them answered.
Once memory has seen DEMO_USER keep a blurry invoice three times, S3.1 first asks whether
to make that the default; "不用，就这三张" passes the review either way."""


@dataclass(eq=False)
class Session:
    """One scripted session: what it sent, every reply it got, and how it ended."""

    session_id: str
    trace_id: str
    turns: tuple[Turn, ...]
    turn: int = -1  # the turn being answered
    done: bool = False
    failure: str | None = None
    sent: list[float] = field(default_factory=list)  # monotonic, per turn
    ended: float = 0.0  # when the last turn said was answered or given up
    answers: list[Envelope] = field(default_factory=list)
    replies: list[tuple[int, float, Envelope]] = field(default_factory=list)
    duplicates: Counter[int] = field(default_factory=Counter)  # same message id again
    extra: Counter[int] = field(default_factory=Counter)  # a second answer to a turn
    _seen: dict[str, int] = field(default_factory=dict)
    _answer: asyncio.Future[Envelope] | None = None

    @property
    def in_flight(self) -> bool:
        return self.turn >= 0 and not self.done and self.failure is None

    def on_reply(self, reply: Envelope, at: float) -> None:
        if reply.message_id in self._seen:
            self.duplicates[self._seen[reply.message_id]] += 1
            return
        self._seen[reply.message_id] = self.turn
        self.replies.append((self.turn, at, reply))
        if not reply.source.startswith("conversation:"):
            return  # a notice of the dispatcher
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(reply)
        elif self.failure is None:
            self.extra[self.turn] += 1

    async def drive(self, app: Client, timeout_s: float, progress: Progress) -> None:
        """Each turn once, after the answer to the one before; stops at the first failure."""
        try:
            for index in range(len(self.turns)):
                progress.tick(0)  # one more waits (once _say has sent it)
                self.failure = await self._say(app, index, timeout_s)
                if self.failure is not None:
                    return
                progress.tick()
            self.done = True
        finally:  # the turns not answered settle now
            progress.tick(len(self.turns) - len(self.sent) + (self.failure is not None))

    async def _say(self, app: Client, index: int, timeout_s: float) -> str | None:
        """Send turn ``index`` and wait for its answer; what went wrong, or None."""
        turn, self.turn = self.turns[index], index
        self._answer = asyncio.get_running_loop().create_future()
        envelope = self._envelope(app, turn)
        self.sent.append(time.monotonic())
        what = f"turn {index + 1} ({turn.text})"
        try:
            await app.send(envelope)
            reply = await asyncio.wait_for(self._answer, timeout_s)
        except HermesError as exc:
            return f"{what}: not sent: {exc}"
        except TimeoutError:
            return f"{what}: no answer within {timeout_s:g} s"
        finally:
            self.ended = time.monotonic()
        self.answers.append(reply)
        problem = EXPECTED[index].judge(reply)
        took = self.ended - self.sent[-1]
        return None if problem is None else f"{what} after {took:.1f} s: {problem}: {_said(reply)}"

    def _envelope(self, app: Client, turn: Turn) -> Envelope:
        """The user turn signed by ``app``, dated like the demo's: DEMO_START at the first."""
        started = self.sent[0] if self.sent else time.monotonic()
        now = DEMO_START + timedelta(seconds=time.monotonic() - started)
        envelope = app.turn(self.session_id, DEMO_USER, turn.text, trace_id=self.trace_id)
        body = UserTurn(text=turn.text, attachments=turn.attachments)
        return envelope.model_copy(update={"timestamp": now, "payload": Payload(body=body)})


def _said(reply: Envelope) -> str:
    return f"{reply.source}: {reply_text(reply)}"


class Progress:
    """Turns settled (answered, or given up with their session), for the kill schedule."""

    def __init__(self, total: int) -> None:
        self.total, self.settled = total, 0
        self._changed = asyncio.Event()

    def tick(self, turns: int = 1) -> None:
        """``turns`` more settled; 0: a turn was sent."""
        self.settled += turns
        self._changed.set()

    async def until(self, ready: Callable[[], bool]) -> bool:
        """Wait until ``ready()``, checked at each turn sent or settled; False if every turn
        settled first, with no more to come."""
        while not ready() and self.settled < self.total:
            self._changed.clear()
            await self._changed.wait()
        return self.settled < self.total


@dataclass
class Outage:
    """One kill -9 of ``up`` and its restart; seconds are counted from the kill."""

    number: int
    in_flight: Counter[int]  # sessions waiting for an answer, by turn
    killed: int  # processes
    killed_at: float  # monotonic
    killed_ms: int  # wall clock, to compare with record timestamps
    incarnation: int = 0  # of up, started after the kill
    serving_s: float | None = None
    first_reply_s: float | None = None
    first_session_reply_s: float | None = None
    recovered: asyncio.Event = field(default_factory=asyncio.Event)  # a session was answered

    def note(self, timestamp_ms: int, ours: bool) -> None:
        """A reply was appended: the first ones produced after the kill end the outage."""
        if timestamp_ms <= self.killed_ms:
            return  # produced before the kill, by the process that was killed
        seconds = (timestamp_ms - self.killed_ms) / 1000
        if self.first_reply_s is None:
            self.first_reply_s = seconds
        if ours and self.first_session_reply_s is None:
            self.first_session_reply_s = seconds
            self.recovered.set()


class Tap:
    """Every reply on the run's ``hermes.conversation.out``, read from its end: handed to its
    session, and the first produced after each kill noted. One consumer for all sessions."""

    def __init__(self, kafka: KafkaConfig, prefix: str, sessions: dict[str, Session]) -> None:
        self.topic = prefix + CONVERSATION_OUT
        self.partitions = Catalog.load().with_overrides(prefix=prefix).get(self.topic).partitions
        self.sessions, self.outages, self.undecodable = sessions, list[Outage](), 0
        self._consumer = AIOKafkaConsumer(
            **kafka.client_kwargs(), group_id=None, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Tap:
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        await self._consumer.start()
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:
            await self._consumer.position(tp)  # fixed now, before the first turn is sent
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()

    async def _read(self) -> None:
        codec = default_codec()
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            at = time.monotonic()
            for record in (r for records in batch.values() for r in records):
                try:
                    reply = codec.decode(record.value or b"")
                except HermesError:
                    self.undecodable += 1
                    continue
                session = self.sessions.get(reply.session_id)
                for outage in self.outages:
                    outage.note(record.timestamp, session is not None)
                if session is not None:
                    session.on_reply(reply, at)


def _processes() -> dict[int, tuple[int, str]]:
    """Every process's parent and start time (from /proc)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    found[int(entry.name)] = (int(fields[1]), fields[19])
    return found


def _family(pid: int) -> list[tuple[int, str]]:
    """The descendants of ``pid``, each with its start time (a reused pid is not them)."""
    table, found, todo = _processes(), list[tuple[int, str]](), [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent:
                found.append((child, started))
                todo.append(child)
    return found


def _kill_family(family: list[tuple[int, str]]) -> None:
    """SIGKILL each of ``family`` that is still that process (each leads its own group)."""
    table = _processes()
    for pid, started in family:
        if table.get(pid, (0, ""))[1] == started:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def kill_tree(proc: asyncio.subprocess.Process) -> int:
    """kill -9 ``proc`` (started leading its own group), its group and everything it started:
    stopped first, so that it starts nothing more; the number of processes killed."""
    with suppress(ProcessLookupError):  # alive (or unreaped): the group is still its own
        os.killpg(proc.pid, signal.SIGSTOP)
    family = _family(proc.pid)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    _kill_family(family)
    await proc.wait()
    return 1 + len(family)


async def stop(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM ``proc``; after ``grace_s``, kill -9 it and whatever it started."""
    family = _family(proc.pid)
    if proc.returncode is None:
        proc.terminate()
        with suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace_s)
    if proc.returncode is None:
        await kill_tree(proc)
    await asyncio.sleep(0.5)  # its children exit with it, or else
    _kill_family(family)


class Up:
    """``hermesbus up --demo`` in its own process group, one incarnation after another."""

    def __init__(self, bootstrap: str, prefix: str, env: dict[str, str], logs: Path) -> None:
        self.args = ("up", "--demo", "--bootstrap", bootstrap, "--prefix", prefix)
        self.env, self.logs, self.count = env, logs, 0
        self.proc: asyncio.subprocess.Process | None = None
        self.serving = asyncio.Event()
        self.served: dict[int, float] = {}  # incarnation -> when it said "serving" (monotonic)
        self.crashed = asyncio.Event()  # exited without being killed here
        self._killed: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def log(self) -> Path:
        return self.logs / f"up-{self.count}.err"

    async def wait_serving(self, timeout_s: float) -> None:
        """Until this incarnation serves; RuntimeError if it exits or takes too long."""
        serving = asyncio.create_task(self.serving.wait())
        crashed = asyncio.create_task(self.crashed.wait())
        done, _ = await asyncio.wait(
            {serving, crashed}, timeout=timeout_s, return_when="FIRST_COMPLETED"
        )
        for task in (serving, crashed):
            task.cancel()
        if serving not in done:
            raise RuntimeError(f"up did not serve within {timeout_s:g} s; see {self.log}")

    async def start(self) -> None:
        self.count += 1
        self.serving = asyncio.Event()
        with (self.logs / f"up-{self.count}.out").open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *CLI, *self.args, env=self.env, stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        for work in (self._read(self.proc, self.count, self.log), self._watch(self.proc)):
            task = asyncio.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read(self, proc: asyncio.subprocess.Process, incarnation: int, path: Path) -> None:
        """Its stderr into the log; noted (and ``serving`` set) at the line saying it serves."""
        if proc.stderr is None:
            return
        serving = self.serving
        with path.open("wb") as log:
            while line := await proc.stderr.readline():
                log.write(line)
                log.flush()
                if SERVING in line:
                    self.served[incarnation] = time.monotonic()
                    serving.set()

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        if proc.pid not in self._killed:
            self.crashed.set()

    async def kill(self) -> tuple[int, float, int]:
        """kill -9, with all it started: processes killed, and when they were all dead
        (monotonic, wall-clock ms)."""
        proc = self._running()
        self._killed.add(proc.pid)
        killed = await kill_tree(proc)
        return killed, time.monotonic(), time.time_ns() // 1_000_000

    async def stop(self) -> None:
        if self.proc is not None:
            self._killed.add(self.proc.pid)
            await stop(self.proc, grace_s=30)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _running(self) -> asyncio.subprocess.Process:
        if self.proc is None or self.proc.returncode is not None:
            raise RuntimeError(f"up is not running; see {self.log}")
        return self.proc


async def restart(up: Up, tap: Tap, number: int) -> None:
    """Kill ``up`` and start it again at once; the outage fills in as replies come back."""
    waiting = Counter(s.turn + 1 for s in tap.sessions.values() if s.in_flight)
    killed, at, wall_ms = await up.kill()
    outage = Outage(number, waiting, killed, at, wall_ms)
    tap.outages.append(outage)
    await up.start()
    outage.incarnation = up.count


async def chaos(args: argparse.Namespace, up: Up, tap: Tap, progress: Progress) -> None:
    """Restart ``up`` at even fractions of the turns, once the last restart has answered a
    session: CYCLES_S after half the sessions allowed at once wait at turn 2."""
    sessions = list(tap.sessions.values())
    want = max(1, args.concurrency // 2)

    def ready(goal: int) -> bool:
        waiting = [s.turn for s in sessions if s.in_flight]
        return progress.settled >= goal and waiting.count(1) >= max(1, min(want, len(waiting)))

    for number in range(1, args.restarts + 1):
        if tap.outages:
            await tap.outages[-1].recovered.wait()
        goal = progress.total * number // (args.restarts + 1)
        if not await progress.until(lambda goal=goal: ready(goal)):
            return  # every session has settled: no one left to hit
        await asyncio.sleep(CYCLES_S)
        await restart(up, tap, number)


async def drive(
    args: argparse.Namespace, app: Client, sessions: list[Session], p: Progress
) -> None:
    """Every session, at most ``--concurrency`` at a time."""
    gate = asyncio.Semaphore(args.concurrency)

    async def one(session: Session) -> None:
        async with gate:
            await session.drive(app, args.turn_timeout, p)

    await asyncio.gather(*(one(s) for s in sessions))


@dataclass
class Run:
    sessions: list[Session]
    outages: list[Outage]
    undecodable: int
    problems: list[str]  # what went wrong with the run itself
    seconds: float


async def exercise(
    args: argparse.Namespace, up: Up, kafka: KafkaConfig, prefix: str, keys: Keyring
) -> Run:
    """The sessions, driven while ``chaos`` restarts ``up``; cut short if ``up`` crashes."""
    run = uuid.uuid4().hex[:6]
    script = [conversations(f"{run}-{i:03d}")[0] for i in range(args.sessions)]
    sessions = [Session(c.session_id, c.trace_id, c.turns[: len(EXPECTED)]) for c in script]
    progress, problems, start = (
        Progress(len(sessions) * len(EXPECTED)),
        list[str](),
        time.monotonic(),
    )
    async with (
        Tap(kafka, prefix, {s.session_id: s for s in sessions}) as tap,
        Client(kafka, name="restarts", topic_prefix=prefix, keys=keys) as app,
    ):
        driving = asyncio.create_task(drive(args, app, sessions, progress))
        killing = asyncio.create_task(chaos(args, up, tap, progress))
        crashed = asyncio.create_task(up.crashed.wait())
        pending: set[asyncio.Task[Any]] = {driving, killing, crashed}
        try:
            while driving in pending and crashed in pending:
                done, pending = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                if killing in done and killing.exception() is not None:
                    problems.append(f"restarting up failed: {killing.exception()!r}")
                    break
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if crashed.done() and not crashed.cancelled():
            problems.append(f"up exited without being killed; see {up.log}")
        seconds = time.monotonic() - start
        await asyncio.sleep(args.grace)  # late duplicates
    return Run(sessions, tap.outages, tap.undecodable, problems, seconds)


async def _run(*command: str, env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)}: exit {proc.returncode}: {err.decode()}")


@asynccontextmanager
async def broker(args: argparse.Namespace, tmp: Path) -> AsyncIterator[tuple[str, str]]:
    """The bootstrap, and where it came from: ``--bootstrap``, else ``hermesbus broker``."""
    if args.bootstrap:
        yield args.bootstrap, "--bootstrap"
        return
    env = {**os.environ, "HERMES_HOME": str(tmp / "broker")}
    with (tmp / "broker.err").open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "broker", env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60) if proc.stdout else b""
        if not line.startswith(b"KAFKA_BOOTSTRAP="):
            raise RuntimeError(f"hermesbus broker said {line!r}; see {tmp / 'broker.err'}")
        yield line.decode().strip().partition("=")[2], f"hermesbus broker, pid {proc.pid}"
    finally:
        await stop(proc, grace_s=10)


def settle(outages: list[Outage], up: Up) -> None:
    """Each outage's seconds until the restarted ``up`` said it serves."""
    for outage in outages:
        if outage.incarnation in up.served:
            outage.serving_s = up.served[outage.incarnation] - outage.killed_at


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def report_outages(outages: list[Outage], turns: int) -> None:
    print(f"{'restart':>7s}  {'in flight by turn':24s} {'killed':>6s} {'serving s':>9s}", end="")
    print(f" {'first reply s':>13s} {'first session reply s':>21s}")
    for o in outages:
        by_turn = "/".join(str(o.in_flight[t]) for t in range(1, turns + 1))
        waiting = f"{sum(o.in_flight.values())} ({by_turn})"
        print(f"{o.number:7d}  {waiting:24s} {o.killed:6d} {_s(o.serving_s):>9s}", end="")
        print(f" {_s(o.first_reply_s):>13s} {_s(o.first_session_reply_s):>21s}")
    print("(serving s: - if the restarted up was killed, or the run ended, before it served)")
    shown = [_s(o.first_reply_s) for o in outages]
    print(f"outage per restart (kill -> first reply after it), s: {', '.join(shown) or '-'}")


def _spanned(session: Session, outages: list[Outage]) -> list[int]:
    """The restarts killed while the session's last turn waited for its answer."""
    sent = session.sent[-1] if session.sent else session.ended
    return [o.number for o in outages if sent <= o.killed_at <= session.ended]


def report_failures(failed: list[Session], outages: list[Outage]) -> None:
    """Each failure, then every other reply of its turn (and later ones), timed from it."""
    for session in failed:
        kills = ", ".join(map(str, _spanned(session, outages))) or "none"
        print(f"  {session.session_id} (restarts during the turn: {kills}):")
        print(f"      {session.failure or 'did not finish'}")
        sent = session.sent[-1] if session.sent else 0.0
        judged = session.answers[-1] if session.answers else None
        for turn, at, reply in session.replies:
            if turn == session.turn and reply is not judged:
                print(f"      +{at - sent:5.1f} s  {_said(reply)}")


def report(args: argparse.Namespace, run: Run) -> bool:
    """Print the counts; True if every session completed with no timeout reply."""
    sessions, turns = run.sessions, len(EXPECTED)
    completed = sum(s.done for s in sessions)
    replies = [r for s in sessions for _, _, r in s.replies]
    timeouts = sum(any(m in reply_text(r) for m in TIMEOUT_MARKERS) for r in replies)
    duplicates = sum((s.duplicates for s in sessions), Counter[int]())
    extra = sum((s.extra for s in sessions), Counter[int]())
    print(f"sessions: {len(sessions)} x {turns} turns, {args.concurrency} at a time, ", end="")
    print(f"turn deadline {args.turn_timeout:g} s, {run.seconds:.0f} s in all")
    print(f"completed: {completed}   failed: {len(sessions) - completed}")
    print(f"replies: {len(replies)}; with timeout text: {timeouts} (must be 0)")
    for name, counts in (("duplicated replies (same message id)", duplicates),
                         ("second answers (another id)", extra)):  # fmt: skip
        by_turn = ", ".join(f"turn {t + 1}: {counts[t]}" for t in range(turns))
        print(f"{name}: {by_turn}")
    if run.undecodable:
        print(f"undecodable records on the replies topic: {run.undecodable}")
    report_outages(run.outages, turns)
    failed = [s for s in sessions if not s.done]
    if failed:
        during = sum(bool(_spanned(s, run.outages)) for s in failed)
        by_turn = Counter(s.turn + 1 for s in failed)
        where = ", ".join(f"turn {t}: {by_turn[t]}" for t in range(1, turns + 1))
        print(f"failed sessions by turn: {where}; {during} of them while a restart happened")
        print("failures:")
        report_failures(failed, run.outages)
    problems = [*run.problems]
    if len(run.outages) < args.restarts:
        problems.append(f"only {len(run.outages)} of {args.restarts} restarts happened")
    for problem in problems:
        print(f"problem: {problem}")
    ok = completed == len(sessions) and timeouts == 0 and not problems
    print("ok" if ok else "FAILED")
    return ok


MODES = {"dynamic": "", "static": "restarts-bench"}
"""Each membership mode and the instance id ``up`` gets in it (HERMES_RUNTIME_INSTANCE_ID):
dynamic members, Kafka's default, or static ones (KIP-345)."""


async def one_mode(args: argparse.Namespace, bootstrap: str, tmp: Path, mode: str) -> Run:
    """The exercise with ``up``'s group members in ``mode``, in a folder and prefix of its own."""
    where = tmp / mode
    where.mkdir()
    prefix = f"restarts-{mode}-{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "HERMES_HOME": str(where / "home"), "PYTHONUNBUFFERED": "1"}
    env |= {"HERMES_KEYS_FILE": str(where / "keys.json"), "HERMES_TOPIC_PREFIX": prefix}
    env["HERMES_RUNTIME_INSTANCE_ID"] = MODES[mode]
    await _run(*CLI, "keys", "init", env=env)
    up = Up(bootstrap, prefix, env, where)
    try:
        await up.start()
        await up.wait_serving(args.start_timeout)
        print(f"{mode} members: up serving (topic prefix {prefix})")
        kafka = KafkaConfig(bootstrap=bootstrap)
        run = await exercise(args, up, kafka, prefix, Keyring.read(where / "keys.json"))
    finally:
        await up.stop()
    settle(run.outages, up)
    return run


def compare(runs: dict[str, Run]) -> None:
    """Kill -> first reply per membership mode, and static against dynamic (same run)."""
    print("kill -> first reply after it, s (each restart; median):")
    medians = {}
    for mode, run in runs.items():
        seconds = [o.first_reply_s for o in run.outages if o.first_reply_s is not None]
        medians[mode] = statistics.median(seconds) if seconds else None
        shown = ", ".join(f"{s:.1f}" for s in seconds) or "-"
        print(f"  {mode:8s} {shown}   median {_s(medians[mode])}")
    dynamic, static = medians.get("dynamic"), medians.get("static")
    if dynamic and static:
        print(f"static/dynamic: {static / dynamic:.2f}")


async def main_async(args: argparse.Namespace) -> bool:
    tmp = Path(tempfile.mkdtemp(prefix="hermes-restarts-"))
    modes = list(MODES) if args.membership == "both" else [args.membership]
    try:
        async with broker(args, tmp) as (bootstrap, how):
            print(f"broker: {bootstrap} ({how}); files: {tmp}")
            runs, ok = {}, True
            for mode in modes:
                runs[mode] = await one_mode(args, bootstrap, tmp, mode)
                print(f"-- {mode} members")
                ok = report(args, runs[mode]) and ok
            compare(runs)
            return ok
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--bootstrap", help="a broker that outlives up; default: start one")
    parser.add_argument("--concurrency", type=int, default=10, help="sessions at a time")
    parser.add_argument("--turn-timeout", type=float, default=120.0, help="s for each answer")
    parser.add_argument("--start-timeout", type=float, default=300.0, help="s for up to serve")
    parser.add_argument("--grace", type=float, default=5.0, help="s to wait for late replies")
    parser.add_argument("--keep", action="store_true", help="keep the logs and homes")
    parser.add_argument(
        "--membership",
        choices=[*MODES, "both"],
        default="both",
        help="up's group members: dynamic, static (an instance id), or both, one after the other",
    )
    sys.exit(0 if asyncio.run(main_async(parser.parse_args())) else 1)


if __name__ == "__main__":
    main()
