"""The processor runtime: handlers in, Kafka consuming, committing and producing around them.

A handler is ``async (HandlerInput) -> Outcome``; :class:`Processor` runs it as one
consumer group with per-session order, effectively-once effects, durable timers,
retries and dead letters. :class:`StateStore` is the port for session state.
"""

from ._model import (
    Effects,
    Handler,
    HandlerInput,
    ModelState,
    Outcome,
    Pause,
    PauseNotice,
    SessionState,
    TimerRequest,
    carried_model,
    derive_id,
)
from ._offsets import OffsetTracker
from ._records import outage
from ._runtime import Processor, ProcessorStats
from ._settings import RuntimeSettings
from ._store import OutRecord, StateChange, StateStore, StoredTimer

__all__ = [
    "Effects",
    "Handler",
    "HandlerInput",
    "ModelState",
    "OffsetTracker",
    "OutRecord",
    "Outcome",
    "Pause",
    "PauseNotice",
    "Processor",
    "ProcessorStats",
    "RuntimeSettings",
    "SessionState",
    "StateChange",
    "StateStore",
    "StoredTimer",
    "TimerRequest",
    "carried_model",
    "derive_id",
    "outage",
]
