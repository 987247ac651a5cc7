"""The dispatcher processor (the "MCP", multi-component protocol): contract, routing and cycles.

Every envelope between components passes here (topic ``hermes.dispatcher``). It checks
the protocol (:data:`RULES`), routes by target, and runs each cycle of tool calls:
memory first, one dispatch per component per round unless ``continue``, the call's
``timeout_ms`` and retry policy (only :data:`RETRYABLE` statuses are retried), fail
fast, and one answer per round. Tool choice reads live health (``ports["health"]``);
a deadline passed while what the round waits for waited for a free worker
(``ports["backlog"]``, a tool's health) is told as ``busy``, not as a failure;
violations are counted in ``ports["violations"]``, and so are memory's refused writes,
which go to ``alerts:dispatcher`` and to the conversation without the cycle id (context
:data:`REFUSED_WRITE`), never as a cycle's answer. Everything an envelope can make grow
is bounded: open cycles per session, tools per cycle, timeouts and retry policies
(rules), and the memory writes one result feeds (:data:`MAX_FACTS`, capped writes
alerted as :data:`CAPPED_WRITES`).

Wiring: ``Processor(NAME, handle, [TOPIC], store=store, ports=dispatcher_ports(health),
kafka=..., settings=..., keyring=...)`` (the program's settings' parts, as ``up`` gives them);
``dispatcher_ports(health)["violations"].summary()`` prints the totals.
"""

from hermesbus.processors.dispatcher._cycle import CAPPED_WRITES, REFUSED_WRITE
from hermesbus.processors.dispatcher._dispatch import RETRYABLE
from hermesbus.processors.dispatcher._emit import ALERTS_ADDRESS
from hermesbus.processors.dispatcher._handler import NAME, TOPIC, handle
from hermesbus.processors.dispatcher._health import HealthChoice, Verdict, choose, result_notices
from hermesbus.processors.dispatcher._memory import MAX_FACTS, MAX_SYMBOLS
from hermesbus.processors.dispatcher._ports import (
    BACKLOG_PORT,
    HEALTH_PORT,
    VIOLATIONS_PORT,
    StaticBacklog,
    StaticHealth,
    ViolationCounter,
    Violations,
    dispatcher_ports,
)
from hermesbus.processors.dispatcher._rules import (
    ALLOWED_BODIES,
    MAX_ATTEMPTS,
    MAX_OPEN_CYCLES,
    MAX_TIMEOUT_MS,
    MAX_TOOLS,
    RULES,
    TIMER_SOURCE,
    Rule,
    Violation,
    first_violation,
)
from hermesbus.processors.dispatcher._state import DispatcherState

__all__ = [
    "ALERTS_ADDRESS",
    "ALLOWED_BODIES",
    "BACKLOG_PORT",
    "CAPPED_WRITES",
    "HEALTH_PORT",
    "MAX_ATTEMPTS",
    "MAX_FACTS",
    "MAX_OPEN_CYCLES",
    "MAX_SYMBOLS",
    "MAX_TIMEOUT_MS",
    "MAX_TOOLS",
    "NAME",
    "REFUSED_WRITE",
    "RETRYABLE",
    "RULES",
    "TIMER_SOURCE",
    "TOPIC",
    "VIOLATIONS_PORT",
    "DispatcherState",
    "HealthChoice",
    "Rule",
    "StaticBacklog",
    "StaticHealth",
    "Verdict",
    "Violation",
    "ViolationCounter",
    "Violations",
    "choose",
    "dispatcher_ports",
    "first_violation",
    "handle",
    "result_notices",
]
