"""The processor runtime: handlers in, Kafka consuming, committing and producing around them.

A handler is ``async (HandlerInput) -> Outcome``; :class:`Processor` runs it as one
consumer group with per-session order, effectively-once effects, durable timers,
retries and dead letters. :class:`StateStore` is the port for session state.

Its parts are public for other consumer groups and for running handlers without Kafka:
:class:`Producer`, :class:`RebalanceListener` and :func:`close_within` (the trace indexer
consumes, produces and closes as a processor does), :func:`dead_letter` (a record's dead
letter), and :func:`emitted` and :func:`timer_fired` (the envelopes an outcome sends, as
the runtime makes them: ``hermesbus.testing`` runs handlers in memory with them).
"""

from ._effects import dead_letter, emitted, timer_fired
from ._model import (
    Effects,
    Handler,
    HandlerInput,
    HandlerRun,
    ModelState,
    News,
    Observer,
    Outcome,
    Pause,
    PauseNotice,
    SessionState,
    TimerRequest,
    carried_model,
    derive_id,
)
from ._offsets import OffsetTracker
from ._producer import CLOSE_TIMEOUT_S, Producer, close_within
from ._rebalance import RebalanceListener
from ._records import outage
from ._runtime import Processor, ProcessorStats, member_client_id, member_consumer
from ._settings import RuntimeSettings
from ._store import OutRecord, StateChange, StateStore, StoredTimer

__all__ = [
    "CLOSE_TIMEOUT_S",
    "Effects",
    "Handler",
    "HandlerInput",
    "HandlerRun",
    "ModelState",
    "News",
    "Observer",
    "OffsetTracker",
    "OutRecord",
    "Outcome",
    "Pause",
    "PauseNotice",
    "Processor",
    "ProcessorStats",
    "Producer",
    "RebalanceListener",
    "RuntimeSettings",
    "SessionState",
    "StateChange",
    "StateStore",
    "StoredTimer",
    "TimerRequest",
    "carried_model",
    "close_within",
    "dead_letter",
    "derive_id",
    "emitted",
    "member_client_id",
    "member_consumer",
    "outage",
    "timer_fired",
]
