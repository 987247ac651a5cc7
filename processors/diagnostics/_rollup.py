"""What the diagnostics rollup adds up, and over which windows: pure, no broker.

Every record on the bus's topics is one *contribution*: the envelope's own diagnostics
(processing time, confidence, external calls) and what it says happened (an error report,
a retry, a fallback answer), counted under each *key* it belongs to:

- ``component:<kind>``: the processor that emitted it (``conversation``, ``dispatcher``,
  ``tool``, ``memory``);
- ``tool:<name>``: a tool's result (what the tool processor emitted for it);
- ``state:<state>``: what the conversation emitted in a flow state (its ``source`` names
  the state: ``conversation:S3.1``).

A dead letter counts under the component of the processor that dead-lettered it (its
``hermes.processor`` header), as a refused record when its signature or signer was
refused, as misrouted when it was on another partition than its key's.

The windows are the record's time (the envelope's ``timestamp``, as every handler's), not
the time it was read: a replay of the same log gives the same windows and totals. Each
record falls in one tumbling window of :data:`TUMBLING_MS` and in the
:data:`HOPPING_MS`/:data:`HOP_MS` hopping windows that cover it.

A :class:`Tally` is one key's figures in one window, and tallies *merge* (counts add,
histograms add bucket by bucket), so a window's figures can be kept per source partition
and added up when it closes, or across workers downstream.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Self

from hermesbus.base.histogram import Histogram
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.payloads import ErrorReport, Payload, ToolResult, ToolResults, WindowRollup
from hermesbus.processors.protocol import FALLBACK
from hermesbus.runtime import derive_id

__all__ = [
    "HOPPING_MS",
    "HOP_MS",
    "TUMBLING_MS",
    "Figures",
    "Tally",
    "Window",
    "Windows",
    "contributions",
    "dead_letter_figures",
    "figures_of",
    "keys_of",
    "rollup_body",
    "rollup_envelope",
    "windows_of",
]

TUMBLING_MS: Final = 60_000
HOPPING_MS: Final = 300_000
HOP_MS: Final = 60_000
_KINDS = {"conversation": "conversation", "mcp": "dispatcher", "dispatcher": "dispatcher"}
_KINDS |= {"tool": "tool", "memory": "memory"}
_REFUSED = ("IdentityError", "SignatureError")


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """``[start_ms, start_ms + size_ms)`` on the records' time; ``kind`` is ``tumbling`` or
    ``hopping``."""

    kind: str
    size_ms: int
    start_ms: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.size_ms


@dataclass(frozen=True, slots=True)
class Windows:
    """The window sizes: a tumbling window of ``tumbling_ms``, and hopping windows of
    ``hopping_ms`` starting every ``hop_ms`` (1 min, and 5 min every 1 min, by default)."""

    tumbling_ms: int = TUMBLING_MS
    hopping_ms: int = HOPPING_MS
    hop_ms: int = HOP_MS

    def __post_init__(self) -> None:
        if min(self.tumbling_ms, self.hopping_ms, self.hop_ms) <= 0:
            raise ValueError("window sizes must be positive")
        if self.hop_ms > self.hopping_ms or self.hopping_ms % self.hop_ms:
            raise ValueError("a hopping window's length must be a whole number of hops")

    def of(self, at_ms: int) -> list[Window]:
        """The tumbling window and every hopping window a record of time ``at_ms`` falls in."""
        tumbling = Window("tumbling", self.tumbling_ms, at_ms - at_ms % self.tumbling_ms)
        last = at_ms - at_ms % self.hop_ms
        first = last - self.hopping_ms + self.hop_ms
        hopping = [
            Window("hopping", self.hopping_ms, start)
            for start in range(first, last + 1, self.hop_ms)
            if start <= at_ms < start + self.hopping_ms
        ]
        return [tumbling, *hopping]


def windows_of(at_ms: int) -> list[Window]:
    """The default :class:`Windows` a record of time ``at_ms`` falls in."""
    return Windows().of(at_ms)


@dataclass(frozen=True, slots=True)
class Figures:
    """What one record contributes to its keys' tallies."""

    error: bool = False
    retry: bool = False
    fallback: bool = False
    dead_letter: bool = False
    refused: bool = False
    misrouted: bool = False
    latency_ms: float | None = None
    confidence: float | None = None
    external_calls: int = 0
    external_latency_ms: float = 0.0
    """The external calls' mean latency (their total is ``calls * mean``)."""
    asked_fallback: bool = False
    """A tool's answer by its fallback because the dispatcher asked for it (the tool was
    unhealthy): it counts under the component, not under the tool, which it says nothing
    of."""


def keys_of(source: str) -> list[str]:
    """The rollup keys of what ``source`` (an envelope's) emitted; [] for an app's."""
    kind, _, rest = source.partition(":")
    component = _KINDS.get(kind)
    if component is None:
        return []
    keys = [f"component:{component}"]
    if component == "tool" and rest and rest != "chat":
        keys.append(f"tool:{rest}")
    if component == "conversation" and rest:
        keys.append(f"state:{rest}")
    return keys


def figures_of(envelope: Envelope, hop_ms: float | None = None) -> Figures:
    """What a decoded envelope contributes (its diagnostics and what its body says).

    Its latency is the processing time its emitter measured, when it measured one (a
    tool's call); else ``hop_ms``, the time from its cause's append to its own as the log
    has it (how the trace waterfall times a step: the dispatcher and the conversation
    read no clock, so their envelopes say no processing time); else none."""
    body = envelope.payload.body
    diagnostics = envelope.diagnostics
    results = body.results if isinstance(body, ToolResults) else ()
    tool_results = [body] if isinstance(body, ToolResult) else list(results)
    said = Figures(
        error=isinstance(body, ErrorReport) or any(r.error is not None for r in tool_results),
        retry=envelope.metadata.attempt > 1,
        fallback=any(r.fallback is not None for r in tool_results),
    )
    measured = diagnostics.processing_time_ms if diagnostics is not None else 0.0
    said = replace(said, latency_ms=measured if measured > 0 else hop_ms)
    if isinstance(body, ToolResult) and body.fallback is not None:
        if envelope.payload.context.get(FALLBACK) is True:
            # the dispatcher sent the call to the fallback: nothing of the tool's own (not
            # counted under the tool, and no confidence: see ``contributions``)
            return replace(said, asked_fallback=True)
        said = replace(said, error=True)  # the tool failed; its fallback answered for it
    if diagnostics is None:  # nothing said: counted, with no confidence
        return said
    return replace(
        said,
        confidence=diagnostics.confidence_score,
        external_calls=diagnostics.external_calls.count,
        external_latency_ms=diagnostics.external_calls.avg_latency_ms,
    )


def dead_letter_figures(headers: object) -> tuple[list[str], Figures]:
    """The keys and figures of a dead letter, from its headers (its bytes may not decode):
    counted under the component that dead-lettered it."""
    processor = h.header(headers, h.DLQ_PROCESSOR) or ""
    error = h.header(headers, h.DLQ_ERROR_CLASS) or ""
    message = h.header(headers, h.DLQ_ERROR_MESSAGE) or ""
    kind = processor.split("-", 1)[0]
    component = _KINDS.get(kind, "unknown")
    figures = Figures(
        dead_letter=True,
        refused=error.rsplit(".", 1)[-1] in _REFUSED,
        misrouted="partition" in message and error.endswith("ContractError"),
    )
    return [f"component:{component}"], figures


@dataclass(slots=True)
class Tally:
    """One key's figures in one window; merges with another by adding."""

    count: int = 0
    errors: int = 0
    retries: int = 0
    fallbacks: int = 0
    dead_letters: int = 0
    refused: int = 0
    misrouted: int = 0
    latency: Histogram = field(default_factory=Histogram)
    confidence_sum: float = 0.0
    confidence_n: int = 0
    external_calls: int = 0
    external_latency_sum_ms: float = 0.0

    def add(self, figures: Figures) -> None:
        self.count += 1
        self.errors += figures.error
        self.retries += figures.retry
        self.fallbacks += figures.fallback
        self.dead_letters += figures.dead_letter
        self.refused += figures.refused
        self.misrouted += figures.misrouted
        if figures.latency_ms is not None:
            self.latency.observe(figures.latency_ms)
        if figures.confidence is not None:
            self.confidence_sum += figures.confidence
            self.confidence_n += 1
        self.external_calls += figures.external_calls
        self.external_latency_sum_ms += figures.external_calls * figures.external_latency_ms

    def merge(self, other: Tally) -> None:
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latency.merge(other.latency)

    @property
    def error_rate(self) -> float:
        return self.errors / self.count if self.count else 0.0

    @property
    def mean_confidence(self) -> float | None:
        """None when nothing in the window said its confidence."""
        return self.confidence_sum / self.confidence_n if self.confidence_n else None

    @property
    def external_latency_ms(self) -> float:
        return self.external_latency_sum_ms / self.external_calls if self.external_calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        kept: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        return kept | {"latency": self.latency.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        made = cls(latency=Histogram.from_dict(data["latency"]))
        for name in _COUNTS:
            setattr(made, name, data[name])
        return made


_COUNTS: Final = (
    "count", "errors", "retries", "fallbacks", "dead_letters", "refused", "misrouted",
    "confidence_sum", "confidence_n", "external_calls", "external_latency_sum_ms",
)  # fmt: skip
"""The additive fields of a :class:`Tally` (all but the histogram)."""


def contributions(
    envelope: Envelope | None, headers: object, *, dead_letter: bool, hop_ms: float | None = None
) -> Iterator[tuple[str, Figures]]:
    """(key, figures) for each key a record counts under: a dead letter by its headers, any
    other record by its envelope (an app's turn counts under no key); ``hop_ms``: see
    :func:`figures_of`."""
    if dead_letter:
        keys, figures = dead_letter_figures(headers)
        yield from ((key, figures) for key in keys)
        return
    if envelope is None:
        return
    figures = figures_of(envelope, hop_ms)
    keys = keys_of(envelope.source)
    if figures.asked_fallback:
        keys = [key for key in keys if not key.startswith("tool:")]
    yield from ((key, figures) for key in keys)


SOURCE: Final = "diagnostics:rollup"
TARGET: Final = "diagnostics:window"
TASK: Final = "window_rollup"


def rollup_body(window: Window, key: str, partition: int, part: int, tally: Tally) -> WindowRollup:
    """One part of a closed window as the record the rollup emits."""
    latency = tally.latency
    counted = latency.count > 0
    return WindowRollup(
        key=key,
        window=window.kind,
        start=from_epoch_ms(window.start_ms),
        end=from_epoch_ms(window.end_ms),
        partitions=(partition,),
        part=part,
        count=tally.count,
        errors=tally.errors,
        retries=tally.retries,
        fallbacks=tally.fallbacks,
        dead_letters=tally.dead_letters,
        refused=tally.refused,
        misrouted=tally.misrouted,
        latency_p50_ms=latency.quantile(0.5) if counted else 0.0,
        latency_p95_ms=latency.quantile(0.95) if counted else 0.0,
        latency_p99_ms=latency.quantile(0.99) if counted else 0.0,
        latency_sum_ms=latency.sum,
        latency_bounds_ms=latency.bounds,
        latency_counts=latency.counts,
        confidence_mean=tally.mean_confidence,
        confidence_n=tally.confidence_n,
        external_calls=tally.external_calls,
        external_latency_ms=tally.external_latency_ms,
    )


def rollup_envelope(
    window: Window,
    key: str,
    partition: int,
    part: int,
    tally: Tally,
    *,
    namespace: str = "",
    marker: str = "",
) -> Envelope:
    """The envelope of one part of a closed window: its id, trace and time are the
    window's, key, partition and part (a re-send after a crash is the same record, and an
    app counting parts drops it by id); ``namespace`` (the topic prefix) keeps two buses'
    ids apart. ``marker`` (the last source offsets the part holds) stands for the part
    number in the id when given: a part is then told apart from one numbered the same
    after its window's entry was forgotten."""
    name = (namespace, window.kind, window.size_ms, window.start_ms, key, partition, marker or part)
    return Envelope(
        message_id=derive_id("rollup", *name),
        timestamp=from_epoch_ms(window.end_ms),
        source=SOURCE,
        target=TARGET,
        session_id=key,
        user_id="",
        trace_id=derive_id("rollup-trace", namespace, window.kind, window.size_ms, window.start_ms),
        payload=Payload(task=TASK, body=rollup_body(window, key, partition, part, tally)),
    )
