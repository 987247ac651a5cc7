"""Collects what one handler call emits, schedules and cancels, and builds the outcome.

Every emitted envelope keeps the input's trace, session, user and timestamp; its
``message_id`` and ``span_id`` are derived from the input's id and its index, as the
runtime would derive them, so causation can be followed in tests and replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from hermesbus import runtime
from hermesbus.contract.envelope import Diagnostics, Envelope, ExternalCalls, Metadata
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import Body, ContextValue
from hermesbus.contract.snapshot import ContextSnapshot
from hermesbus.processors.protocol import DISPATCHER_ADDRESS, answer
from hermesbus.runtime import TimerRequest

__all__ = ["ALERTS_ADDRESS", "Effects", "diagnostics"]

ALERTS_ADDRESS = "alerts:dispatcher"
"""Where every violation report (and an error nobody can take) goes."""


def diagnostics(count: int, confidence: float = 1.0, latency_ms: float = 0.0) -> Diagnostics:
    """What the dispatcher reports on an envelope; no wall clock, so no processing time."""
    return Diagnostics(
        external_calls=ExternalCalls(count=count, avg_latency_ms=latency_ms),
        confidence_score=confidence,
    )


_NO_CALLS = diagnostics(0)
_DEFAULT = Metadata()
"""Shared by the envelopes that need no other (models are frozen)."""


class Effects(runtime.Effects):
    """The dispatcher's envelopes, timers and cancellations of one handler call, in order."""

    __slots__ = ()

    @property
    def now_ms(self) -> int:
        return epoch_ms(self.source.timestamp)

    def send(
        self,
        target: str,
        body: Body,
        *,
        task: str,
        context: Mapping[str, ContextValue] | None = None,
        causation_id: str | None = None,
        metadata: Metadata | None = None,
        snapshot: ContextSnapshot | None = None,
        diag: Diagnostics | None = None,
    ) -> Envelope:
        """Emit ``body`` from the dispatcher to ``target``."""
        envelope = answer(
            self.source,
            self.index,
            source=DISPATCHER_ADDRESS,
            target=target,
            body=body,
            task=task,
            context=context or {},
            causation_id=causation_id,
            metadata=metadata or _DEFAULT,
            snapshot=snapshot,
            diagnostics=diag or _NO_CALLS,
        )
        return self.emit(envelope)

    def arm(self, after_ms: int, purpose: str, data: Mapping[str, Any]) -> None:
        """A durable timer ``after_ms`` after the input's time; replaces one of that purpose."""
        due = self.source.timestamp + timedelta(milliseconds=after_ms)
        self.schedule(TimerRequest(due, purpose, json.dumps(dict(data), sort_keys=True)))
