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
from hermesbus.contract.payloads import ErrorReport, ToolResult, ToolResults

__all__ = [
    "HOPPING_MS",
    "HOP_MS",
    "TUMBLING_MS",
    "Figures",
    "Tally",
    "Window",
    "contributions",
    "dead_letter_figures",
    "figures_of",
    "keys_of",
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
    """``[start_ms, start_ms + size_ms)`` on the records' time."""

    size_ms: int
    start_ms: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.size_ms

    @property
    def kind(self) -> str:
        return "tumbling" if self.size_ms == TUMBLING_MS else "hopping"

    def closed_by(self, watermark_ms: int) -> bool:
        """Whether no record before ``watermark_ms`` (records' time) can still fall in it."""
        return self.end_ms <= watermark_ms


def windows_of(at_ms: int) -> list[Window]:
    """The tumbling window and every hopping window a record of time ``at_ms`` falls in."""
    tumbling = Window(TUMBLING_MS, at_ms - at_ms % TUMBLING_MS)
    last = at_ms - at_ms % HOP_MS
    hopping = [
        Window(HOPPING_MS, start)
        for start in range(last - HOPPING_MS + HOP_MS, last + 1, HOP_MS)
        if start <= at_ms < start + HOPPING_MS
    ]
    return [tumbling, *hopping]


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


def figures_of(envelope: Envelope) -> Figures:
    """What a decoded envelope contributes (its diagnostics and what its body says)."""
    body = envelope.payload.body
    diagnostics = envelope.diagnostics
    results = body.results if isinstance(body, ToolResults) else ()
    tool_results = [body] if isinstance(body, ToolResult) else list(results)
    said = Figures(
        error=isinstance(body, ErrorReport) or any(r.error is not None for r in tool_results),
        retry=envelope.metadata.attempt > 1,
        fallback=any(r.fallback is not None for r in tool_results),
    )
    if diagnostics is None:  # nothing measured: counted, with no time or confidence
        return said
    return replace(
        said,
        latency_ms=diagnostics.processing_time_ms,
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
    envelope: Envelope | None, headers: object, *, dead_letter: bool
) -> Iterator[tuple[str, Figures]]:
    """(key, figures) for each key a record counts under: a dead letter by its headers, any
    other record by its envelope (an app's turn counts under no key)."""
    if dead_letter:
        keys, figures = dead_letter_figures(headers)
        yield from ((key, figures) for key in keys)
        return
    if envelope is None:
        return
    figures = figures_of(envelope)
    yield from ((key, figures) for key in keys_of(envelope.source))
