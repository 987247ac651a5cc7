"""The conversation processor: the flow engine (any registered flow, ``_engine``) and the
built-in expense report (its machine read from its spec) over the bus.

``handle`` is the processor's handler (name ``conversation``, topic
``hermes.conversation.in``); ``build_ports`` gives its ports from the ``HERMES_LLM_*`` and
``HERMES_CONVERSATION_TIMEZONE`` settings. The expense report's machine is data
(``MACHINE``, read from ``processors/flow/expense.yaml``); intent parsing is a port
(``IntentParser``: ``RuleIntentParser`` by default, ``HttpIntentParser`` when configured).
"""

from hermesbus.errors import TransitionError  # the error tree holds it; exported here too
from hermesbus.processors.conversation._confirm import MAX_CONFIRMATION_WORDS, is_confirmation
from hermesbus.processors.conversation._context import UNFINISHED_LABEL
from hermesbus.processors.conversation._engine import FLOW_SETTLE_MS, NOT_UNDERSTOOD
from hermesbus.processors.conversation._flow import report_id
from hermesbus.processors.conversation._handler import NAME, TIMER_SOURCE, TOPIC, handle
from hermesbus.processors.conversation._history import (
    HISTORY_BUDGET_TOKENS,
    History,
    Message,
    estimate_tokens,
    new_message,
    render_pinned,
)
from hermesbus.processors.conversation._intent import (
    DEFAULT_TIMEZONE,
    Intent,
    IntentName,
    IntentParser,
    RuleIntentParser,
    negation,
    normalise_city,
    relative_period,
)
from hermesbus.processors.conversation._llm import HttpIntentParser
from hermesbus.processors.conversation._machine import (
    FAILURE,
    MACHINE,
    STATE_SPECS,
    TRANSITION_TABLE,
    Machine,
    StateSpec,
    Timeout,
    Transition,
)
from hermesbus.processors.conversation._results import EXITS
from hermesbus.processors.conversation._session import (
    MAX_PROBLEMS,
    Session,
    canonical_json,
    digest,
    snapshot_of,
)
from hermesbus.processors.conversation._settings import (
    BUDGETS_PORT,
    INTENT_PORT,
    Budgets,
    ConversationSettings,
    CycleBudgets,
    build_ports,
    zone_of,
)

__all__ = [
    "BUDGETS_PORT",
    "DEFAULT_TIMEZONE",
    "EXITS",
    "FAILURE",
    "FLOW_SETTLE_MS",
    "HISTORY_BUDGET_TOKENS",
    "INTENT_PORT",
    "MACHINE",
    "MAX_CONFIRMATION_WORDS",
    "MAX_PROBLEMS",
    "NAME",
    "NOT_UNDERSTOOD",
    "STATE_SPECS",
    "TIMER_SOURCE",
    "TOPIC",
    "TRANSITION_TABLE",
    "UNFINISHED_LABEL",
    "Budgets",
    "ConversationSettings",
    "CycleBudgets",
    "History",
    "HttpIntentParser",
    "Intent",
    "IntentName",
    "IntentParser",
    "Machine",
    "Message",
    "RuleIntentParser",
    "Session",
    "StateSpec",
    "Timeout",
    "Transition",
    "TransitionError",
    "build_ports",
    "canonical_json",
    "digest",
    "estimate_tokens",
    "handle",
    "is_confirmation",
    "negation",
    "new_message",
    "normalise_city",
    "relative_period",
    "render_pinned",
    "report_id",
    "snapshot_of",
    "zone_of",
]
