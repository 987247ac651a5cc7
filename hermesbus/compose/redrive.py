"""Redrive and fork: a recorded session played again, for real, in sandbox topics.

``hermesbus replay --redrive --into PREFIX`` takes what came into the bus from outside
in the slice (the apps' user turns, in the order they were consumed), copies each to
``PREFIX.hermes.conversation.in`` with the headers :data:`REPLAY_ID` and
:data:`REPLAY_ORIGIN` (``topic/partition/offset/timestamp`` of the original), and runs
the four processors on the ``PREFIX.`` topics, each turn sent once the previous one was
answered, as a user would. Everything the sandbox keeps is its own:

* topics ``PREFIX.*`` and consumer groups ``PREFIX.<processor>``, on a prefix that was
  fresh or that a redrive marked as its sandbox (``hermesbus.replay.sandbox``): another
  environment's prefix is refused before anything is written;
* state, memory, tool registry and a trace index (SQLite) under
  ``$HERMES_HOME/replays/<PREFIX>/``, never a production server or file: the sandbox's
  settings are made from the bus's by :meth:`Settings.sandbox`, which keeps every store
  in that folder and configures no server; only the keyring is shared (read);
* tools answer what they answered then for the same arguments (recorded mode), or run
  for real with ``--live-tools`` (the production registry's specs, copied); the
  dispatcher sees the tool health it saw then;
* the flows the sessions ran are registered in the sandbox's registry as they were on the
  bus (every version, each at the time it was registered there, so a turn chooses the
  version it chose then), read from the bus's registry or, without a broker, from the
  copies its state folder keeps; their frequent paths' counts start where the recorded
  sessions found them.

``--fork MESSAGE_ID --set FIELD=VALUE``: one of the copied turns is changed (fields by
their dotted path in the envelope's JSON, e.g. ``payload.body.text``) and given a new id
(:data:`FORK_OF` says which it replaces); ``lineage.json`` in the sandbox's folder
records it, and ``hermesbus trace TRACE --sandbox PREFIX`` shows both branches.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hermesbus.base.config import writable_home
from hermesbus.client import Client, says_more
from hermesbus.compose.flows import FlowCopy, copies_of, flow_copies
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import REPLAYABLE, Progress, stack
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import Reply, UserTurn
from hermesbus.errors import ConfigError
from hermesbus.identity import KeySettings
from hermesbus.processors import dispatcher, flow, protocol
from hermesbus.processors.recorded import ArgumentTools, health_of
from hermesbus.replay.sandbox import claim
from hermesbus.replay.shadow import Recording, consumed_order
from hermesbus.runtime import derive_id
from hermesbus.topics import CONVERSATION_IN
from hermesbus.trace.index import INDEXER_GROUP
from hermesbus.trace.spans import Hop

__all__ = [
    "FORK_OF",
    "REPLAY_ID",
    "REPLAY_ORIGIN",
    "Fork",
    "Redriven",
    "external_inputs",
    "forked",
    "lineage_of",
    "redrive",
    "sandbox_home",
]

REPLAY_ID = "hermes.replay.id"
"""On every record a redrive copies: the redrive's id (the sandbox prefix)."""
REPLAY_ORIGIN = "hermes.replay.origin"
"""``topic/partition/offset/timestamp`` of the record it is a copy of."""
FORK_OF = "hermes.replay.fork_of"
"""On a forked turn: the message id of the turn it replaces."""
_SANDBOX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A sandbox's name: also a folder name and the front of topic and group names."""


@dataclass(frozen=True)
class Fork:
    """Which copied turn to change, and how: dotted envelope paths and JSON (or text) values."""

    message_id: str
    sets: Mapping[str, str]


@dataclass
class Redriven:
    """What a redrive did: turns sent, each one's replies, the fork, where it all is."""

    prefix: str
    home: Path
    bootstrap: str
    embedded: bool
    sent: list[Envelope] = field(default_factory=list)
    replies: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Message id of each turn sent -> its replies as ``(source, text)``: the dispatcher's
    notices, then the conversation's answer."""
    unanswered: list[str] = field(default_factory=list)
    """Message ids of turns that got no reply within the timeout."""
    forks: list[dict[str, Any]] = field(default_factory=list)
    flows: list[str] = field(default_factory=list)
    """The flow versions copied into the sandbox's registry (``flow vN``)."""


def sandbox_home(home: Path, prefix: str) -> Path:
    """``HOME/replays/<prefix>``: the sandbox's state, stores and trace index (``home``:
    the bus's state folder)."""
    name = prefix.rstrip(".")
    if not _SANDBOX.fullmatch(name):
        raise ConfigError(
            f"--into {prefix!r}: a sandbox prefix of letters, digits, '-', '_' and '.' "
            "(e.g. replay-1.)"
        )
    return home / "replays" / name


def external_inputs(
    recording: Recording,
    sessions: Sequence[str],
    prefix: str = "",
    *,
    selected: Callable[[Hop], bool] | None = None,
) -> list[Hop]:
    """The apps' user turns of ``sessions``, in the order the conversation consumed them,
    each once: what came into the bus from outside (the rest the processors make again).

    ``selected`` (a slice: a trace, a time range) ends them at the last turn it keeps;
    the turns before it stay, so the sandbox reaches the slice with the state it had."""
    topic = prefix + CONVERSATION_IN
    seen: set[str] = set()
    found = []
    for hop in consumed_order(h for h in recording.hops if h.topic == topic):
        env = hop.envelope
        if env.session_id not in sessions or not isinstance(env.payload.body, UserTurn):
            continue
        if not env.source.startswith("app:") or env.message_id in seen:
            continue
        seen.add(env.message_id)
        found.append(hop)
    if selected is not None:
        kept = [index for index, hop in enumerate(found) if selected(hop)]
        found = found[: kept[-1] + 1] if kept else []
    return found


def forked(envelope: Envelope, fork: Fork, replay_id: str) -> Envelope:
    """``envelope`` with ``fork.sets`` applied and a new id; ConfigError naming a bad field."""
    data = envelope.model_dump(mode="json")
    for path, text in fork.sets.items():
        _set(data, path, _value(text))
    data["message_id"] = derive_id(envelope.message_id, "fork", replay_id)
    try:
        return Envelope.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"--set: the forked envelope is invalid at {where}: {first['msg']}"
        ) from None


def _value(text: str) -> Any:
    """JSON when it parses (numbers, true, lists), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        node = _step(node, part, ".".join(parts[: depth + 1]), path)
    last = parts[-1]
    if not isinstance(node, dict) or last not in node:
        raise ConfigError(f"--set {path}: the envelope has no field {path!r}")
    node[last] = value


def _step(node: Any, part: str, so_far: str, path: str) -> Any:
    if isinstance(node, dict) and part in node and isinstance(node[part], dict | list):
        child = node[part]
        # a union-tagged body ({"hermes.mcp.UserTurn": {...}}) is walked through its tag
        if isinstance(child, dict) and len(child) == 1 and next(iter(child)).startswith("hermes."):
            return next(iter(child.values()))
        return child
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise ConfigError(f"--set {path}: the envelope has no field {so_far!r}")


_GROUPS = (*REPLAYABLE, INDEXER_GROUP)
"""The consumer groups a sandbox joins (after its prefix; each tool's own only with
``--live-tools``)."""


def _sandboxed(settings: Settings, home: Path) -> Settings:
    """The sandbox's settings, made from the bus's; ConfigError if any store they give is
    not the sandbox's own (a SQLite file in ``home``, no server), which would mean a part
    of the settings that :meth:`Settings.sandbox` does not move yet.

    The sandbox signs and verifies with the bus's keyring, read, never written: where the
    bus has no complete keyring (a bundle replayed on another machine, a fresh state
    folder), the sandbox makes keys of its own in its folder instead."""
    keys = settings.keys
    if not keys.file.exists() or keys.load().lacking(protocol.IDENTITIES):
        keys = KeySettings(file=home / "keys.json")
    sandbox = settings.sandbox(home, keys=keys)
    outside = sandbox.outside(home)
    if outside:
        raise ConfigError(
            f"a redrive keeps every store in its sandbox {home}, but the settings give "
            f"{', '.join(outside)}: refused, it would write production's stores"
        )
    return sandbox


def _recorded_health(recording: Recording) -> dispatcher.StaticHealth:
    """Each tool as healthy as the dispatcher last found it in the recording."""
    table = dispatcher.StaticHealth()
    for hop in recording.hops:
        health = health_of(hop.envelope)
        if health is not None:
            table.set(health)
    return table


async def redrive(
    recording: Recording,
    sessions: Sequence[str],
    settings: Settings,
    *,
    into: str,
    source_prefix: str = "",
    fork: Fork | None = None,
    live_tools: bool = False,
    reply_timeout_s: float = 60.0,
    say: Progress | None = None,
    selected: Callable[[Hop], bool] | None = None,
    carried: Sequence[FlowCopy] = (),
) -> Redriven:
    """Copy the sessions' turns into ``into`` topics and run the processors there (up to
    the last turn ``selected`` keeps; see :func:`external_inputs`). ``settings``: the
    bus's (its broker, state folder and keys); the sandbox's are made from them."""
    prefix = into if into.endswith(".") else into + "."
    if prefix == source_prefix:
        raise ConfigError(f"--into {into!r} is the recording's own prefix: choose a sandbox prefix")
    kafka = settings.kafka
    home = sandbox_home(settings.home, prefix)
    inputs = external_inputs(recording, sessions, source_prefix, selected=selected)
    if not inputs:
        raise ConfigError(f"no user turn of {', '.join(sessions)} in {recording.source}")
    if fork is not None and fork.message_id not in {h.envelope.message_id for h in inputs}:
        turns = ", ".join(h.envelope.message_id for h in inputs)
        raise ConfigError(
            f"--fork {fork.message_id}: not a user turn of the slice (those are {turns})"
        )
    if (home / "lineage.json").exists():
        raise ConfigError(
            f"sandbox {prefix} was used before ({home}): its state would skip the turns as "
            "already applied. Choose another --into (or remove that folder and its topics)"
        )
    needed = recording.flows(sessions)
    if live_tools and any(copy.spec.flow in needed for copy in carried):
        raise ConfigError(
            "--live-tools: the bundle's flows carry no signature, so they are not run against "
            "the registered tools; redrive it with the tools answering as recorded (without "
            "--live-tools), or redrive the session from the bus, whose registry is signed"
        )
    keyring = settings.keys.load()
    copies = flow_copies(settings.home, source_prefix)
    flows = (
        await copies_of(needed, kafka, source_prefix, keyring, copies, carried=carried)
        if needed
        else []
    )
    if kafka.bootstrap:  # else a new embedded broker: nothing on it but the sandbox
        await claim(kafka, prefix, [prefix + name for name in _GROUPS])
    production = writable_home(settings.home)
    sandbox = _sandboxed(settings, home)
    home.mkdir(parents=True, exist_ok=True)
    tools = None if live_tools else ArgumentTools.of(recording)
    health = None if live_tools else _recorded_health(recording)
    async with stack(
        settings=sandbox,
        prefix=prefix,
        index=SqliteTraceIndex(home / "index.sqlite3"),
        tool_port=tools,
        health=health,
        copy_tools_from=production if live_tools else None,
        copy_flows=flows,
        paths=flow.MemoryPaths.as_recorded(
            hop.envelope for hop in recording.hops if hop.envelope.session_id in sessions
        ),  # the counts the redriven sessions found, not another session's
        progress=say,
    ) as running:
        done = Redriven(prefix, home, running.bootstrap, running.embedded)
        done.flows = [f"{copy.spec.flow} v{copy.spec.version}" for copy in flows]
        client = Client(
            kafka.model_copy(update={"bootstrap": running.bootstrap}),
            settings=sandbox,
            name="replay",
            topic_prefix=prefix,
            keys=sandbox.keys.load(),
            trust=sandbox.keys.public,
        )
        async with client:
            for hop in inputs:
                await _send(client, hop, done, fork, reply_timeout_s)
        await _settle(running.processors)
    _write_lineage(done, recording)
    return done


async def _send(
    client: Client, hop: Hop, done: Redriven, fork: Fork | None, timeout_s: float
) -> None:
    original = hop.envelope
    envelope = original
    extra = [
        (REPLAY_ID, done.prefix.encode()),
        (REPLAY_ORIGIN, f"{hop.topic}/{hop.partition}/{hop.offset}/{hop.appended_ms}".encode()),
    ]
    if fork is not None and fork.message_id == original.message_id:
        envelope = forked(original, fork, done.prefix)
        extra.append((FORK_OF, original.message_id.encode()))
        done.forks.append(
            {
                "original": original.message_id,
                "fork": envelope.message_id,
                "trace": original.trace_id,
                "set": dict(fork.sets),
            }
        )
    texts: list[tuple[str, str]] = []
    async with client.replies(envelope.session_id) as replies:
        await client.send(envelope, headers=extra)
        done.sent.append(envelope)
        try:
            async with asyncio.timeout(timeout_s):
                async for reply in replies:
                    if reply.trace_id == envelope.trace_id and isinstance(
                        reply.payload.body, Reply
                    ):
                        texts.append((reply.source, reply.payload.body.text))
                        if reply.source.startswith("conversation:") and not says_more(reply):
                            break  # the answer; notices and a flow's earlier replies come first
        except TimeoutError:
            done.unanswered.append(envelope.message_id)
    done.replies[envelope.message_id] = texts


async def _settle(processors: Sequence[Any], quiet_s: float = 1.0, within_s: float = 30.0) -> None:
    """Wait until the processors stop processing (the last turn's writes go on after its reply)."""

    def total() -> int:
        return sum(p.stats.processed for p in processors)

    deadline = asyncio.get_running_loop().time() + within_s
    last = total()
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(quiet_s)
        now = total()
        if now == last:
            return
        last = now


def _write_lineage(done: Redriven, recording: Recording) -> None:
    lineage = {
        "replay_id": done.prefix,
        "prefix": done.prefix,
        "from": recording.source,
        "bootstrap": done.bootstrap,
        "embedded": done.embedded,
        "sent": [e.message_id for e in done.sent],
        "forks": done.forks,
    }
    (done.home / "lineage.json").write_text(json.dumps(lineage, ensure_ascii=False, indent=2))


def lineage_of(home: Path, prefix: str) -> dict[str, Any]:
    """The sandbox's ``lineage.json`` (``home``: the bus's state folder); ConfigError when
    there is no such sandbox."""
    path = sandbox_home(home, prefix if prefix.endswith(".") else prefix + ".") / "lineage.json"
    if not path.exists():
        raise ConfigError(
            f"no sandbox {prefix!r}: {path} does not exist (replay --redrive --into {prefix})"
        )
    return dict(json.loads(path.read_text()))
