"""What handlers see and return: a frozen input, an outcome, and the session state."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel

from hermesbus.contract.envelope import Envelope

__all__ = [
    "Effects",
    "Handler",
    "HandlerInput",
    "HandlerRun",
    "ModelState",
    "News",
    "Observer",
    "Outcome",
    "Pause",
    "PauseNotice",
    "SessionState",
    "TimerRequest",
    "carried_model",
    "derive_id",
]

_IDS = uuid.UUID("6f1c7a52-3f0e-4c55-9a77-6d3b2f8e1c40")
"""Namespace of derived ids; fixed forever, or replays would mint different ids."""

_SEED = hashlib.sha1(_IDS.bytes, usedforsecurity=False)
"""The hash of the namespace, copied for each id (uuid5 hashes namespace + name)."""

EMPTY: Mapping[str, Any] = MappingProxyType({})


def derive_id(*parts: object) -> str:
    """A stable id from its inputs (uuid5), e.g. ``derive_id(input_id, "out", 0)``.

    ``uuid.uuid5`` spelled out (every envelope a handler emits takes two or three ids, and
    a replay derives them again): SHA-1 of namespace and name, the first 16 bytes with
    the version (5) and the RFC 4122 variant set, formatted 8-4-4-4-12."""
    digest = _SEED.copy()
    digest.update("/".join(map(str, parts)).encode())
    raw = bytearray(digest.digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's state as a processor last saved it.

    ``version`` is the compare-and-set token (0: never saved); ``applied`` holds the
    ids of the latest envelopes whose effects are saved, so a redelivery is skipped.
    """

    version: int = 0
    data: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    applied: tuple[str, ...] = ()


M = TypeVar("M", bound=BaseModel)


class ModelState(Mapping[str, Any]):
    """A handler's new state given as its own frozen model.

    Read as a mapping it is the model's JSON dump, made once when first read; that is what
    a store saves. While the runtime keeps the session cached (and in the harness), the
    session's next envelope gets this very object back as ``state.data``, and its handler
    takes the model with :func:`carried_model` instead of validating the saved JSON again. So the
    model must never change once returned: a frozen model, changed only by copies.

    A session behaves the same either way, because the stores keep the keys of saved
    JSON in the order the dump gives them (see ``connectors.sqlite.state``)."""

    __slots__ = ("_dump", "model")

    def __init__(self, model: BaseModel) -> None:
        self.model = model
        self._dump: dict[str, Any] | None = None

    def _data(self) -> dict[str, Any]:
        if self._dump is None:
            self._dump = self.model.model_dump(mode="json")
        return self._dump

    def __getitem__(self, key: str) -> Any:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return f"ModelState({type(self.model).__name__})"


def carried_model(data: Mapping[str, Any], kind: type[M]) -> M | None:
    """The model of ``kind`` that ``data`` holds when the previous call returned it as a
    :class:`ModelState` and it was kept; None when ``data`` was loaded (validate it then)."""
    if type(data) is ModelState and type(data.model) is kind:
        model: M = data.model
        return model
    return None


@dataclass(frozen=True, slots=True)
class TimerRequest:
    """Fire a ``timer_fired`` envelope with ``purpose`` at ``due_at`` (from envelope time).

    One timer per session and purpose: scheduling the purpose again replaces it.
    """

    due_at: datetime
    purpose: str
    data_json: str = "null"


@dataclass(frozen=True, slots=True)
class HandlerInput:
    """Everything a handler may use; it must not read the clock or a random source."""

    envelope: Envelope
    state: SessionState
    processor: str
    ports: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    topic: str = ""
    partition: int = -1
    offset: int = -1
    appended_ms: int = -1
    """The record's Kafka timestamp (its producer's clock when it was sent), -1 where there
    is no record; recorded in the log, so a replay gives the handler the same value."""
    news: News | None = None
    """Sends news about the work under way at once (a tool's progress), signed, on its
    target's topic; best effort, not an output: never replayed (None where nothing runs
    live: a replay, the harness)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a handler decided: envelopes to emit, the new state, timers to set or cancel.

    ``state=None`` keeps the state as it was. Emitted envelopes get their
    ``message_id`` derived from the input's id and their index, and
    ``causation_id`` set to the input's id when the handler left it empty.
    """

    emit: tuple[Envelope, ...] = ()
    state: Mapping[str, Any] | None = None
    timers: tuple[TimerRequest, ...] = ()
    cancel: tuple[str, ...] = field(default=())
    """Purposes of timers to cancel."""
    others: bool = False
    """The envelope is another consumer group's to answer (a topic several groups read,
    each taking its share): nothing ran, so the run is neither timed nor observed."""


Handler = Callable[[HandlerInput], Awaitable[Outcome]]
"""``async (HandlerInput) -> Outcome``."""


class Effects:
    """What one handler call accumulates, in order: envelopes to emit, timers to set and
    timer purposes to cancel; :meth:`outcome` turns them into the :class:`Outcome`.

    Processors build their own helpers on it (the conversation's ``Step``, the
    dispatcher's ``Effects``), so every handler collects its effects the same way.
    """

    __slots__ = ("_cancelled", "_timers", "emitted", "source")

    def __init__(self, source: Envelope) -> None:
        self.source = source
        """The input envelope: emitted envelopes take their ids and time from it."""
        self.emitted: list[Envelope] = []
        self._timers: dict[str, TimerRequest] = {}
        self._cancelled: list[str] = []

    @property
    def index(self) -> int:
        """The index the next emitted envelope gets (its id is derived from it)."""
        return len(self.emitted)

    def emit(self, envelope: Envelope) -> Envelope:
        self.emitted.append(envelope)
        return envelope

    def schedule(self, request: TimerRequest) -> None:
        """Set a timer; one of the same purpose set earlier in this call is replaced, and
        a cancellation of the purpose in this call is withdrawn."""
        if request.purpose in self._cancelled:
            self._cancelled.remove(request.purpose)
        self._timers.pop(request.purpose, None)
        self._timers[request.purpose] = request

    def forget(self, purpose: str) -> None:
        """Drop a timer set in this call (a timer saved earlier stays; see :meth:`cancel`)."""
        self._timers.pop(purpose, None)

    def cancel(self, purpose: str) -> None:
        """Cancel the purpose: a timer set in this call, and one saved earlier."""
        self._timers.pop(purpose, None)
        if purpose not in self._cancelled:
            self._cancelled.append(purpose)

    @property
    def timers(self) -> tuple[TimerRequest, ...]:
        return tuple(self._timers.values())

    @property
    def cancelled(self) -> tuple[str, ...]:
        return tuple(self._cancelled)

    def pending(self) -> tuple[str, ...]:
        """Purposes of the timers set in this call."""
        return tuple(self._timers)

    def outcome(self, state: Mapping[str, Any] | None) -> Outcome:
        return Outcome(
            emit=tuple(self.emitted),
            state=state,
            timers=self.timers,
            cancel=self.cancelled,
        )


@dataclass(frozen=True, slots=True)
class Pause:
    """A record held in place by a backend outage, as its :data:`PauseNotice` is told.

    ``since_ms``: when the outage first stopped it (wall clock); ``every_ms``: the longest
    gap before the next notice while it lasts; ``number``: 0 for the first notice."""

    error: BaseException
    since_ms: int
    now_ms: int
    every_ms: int
    number: int


News = Callable[[Envelope], Awaitable[None]]
"""What a handler sends at once, before its outcome (:attr:`HandlerInput.news`)."""


@dataclass(frozen=True, slots=True)
class HandlerRun:
    """One run of a processor's handler, as its :data:`Observer` is told: the envelope,
    where its record was, when the run began and ended (nanoseconds since the epoch, the
    wall clock) and the error it raised.

    A run without an error is *the* run of the envelope, told once its state change was
    saved (the one that took effect); a run with one is a failed attempt (retried or
    dead-lettered after). A run redone elsewhere (revoked, or another worker saved the
    session first) is not told; in exactly-once mode a run whose transaction aborts
    after its state was saved is told, and its redo is told again."""

    processor: str
    envelope: Envelope
    topic: str
    partition: int
    offset: int
    began_ns: int
    ended_ns: int
    error: BaseException | None = None


Observer = Callable[[HandlerRun], None]
"""Told of every handler run, after it (a span exporter): it must not block, and what it
raises is logged, never the record's failure. Observation, not an output: never replayed."""

PauseNotice = Callable[[Envelope, Pause], Envelope | None]
"""What a processor tells the sender of an envelope held by an outage (None: nothing).

The runtime sends it at once and again at least every ``every_ms`` while the outage
lasts, so a sender waiting on a budget (the dispatcher's cycle) does not charge the
downtime to it. It is news about the bus, not an output of the handler: never replayed."""
