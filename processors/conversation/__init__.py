"""The conversation processor: the flow engine (``_engine``) over the bus. Every session
runs a flow: a registered one, or the built-in expense report
(``processors/flow/expense.yaml`` and its hooks).

``handle`` is the processor's handler (name ``conversation``, topic
``hermes.conversation.in``); ``build_ports`` gives its ports from the ``HERMES_LLM_*`` and
``HERMES_CONVERSATION_TIMEZONE`` settings. Reading turns is a port (``IntentParser``: the
flows' rules alone by default, ``HttpIntentParser`` adds a model when configured).
"""

from hermesbus.errors import TransitionError  # the error tree holds it; exported here too
from hermesbus.processors.conversation._confirm import MAX_CONFIRMATION_WORDS, is_confirmation
from hermesbus.processors.conversation._engine import FLOW_SETTLE_MS, NOT_UNDERSTOOD
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
    IntentParser,
    RuleIntentParser,
)
from hermesbus.processors.conversation._llm import HttpIntentParser
from hermesbus.processors.conversation._session import (
    MAX_PROBLEMS,
    Session,
    canonical_json,
    digest,
    load_session,
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
    "FLOW_SETTLE_MS",
    "HISTORY_BUDGET_TOKENS",
    "INTENT_PORT",
    "MAX_CONFIRMATION_WORDS",
    "MAX_PROBLEMS",
    "NAME",
    "NOT_UNDERSTOOD",
    "TIMER_SOURCE",
    "TOPIC",
    "Budgets",
    "ConversationSettings",
    "CycleBudgets",
    "History",
    "HttpIntentParser",
    "IntentParser",
    "Message",
    "RuleIntentParser",
    "Session",
    "TransitionError",
    "build_ports",
    "canonical_json",
    "digest",
    "estimate_tokens",
    "handle",
    "is_confirmation",
    "load_session",
    "new_message",
    "render_pinned",
    "snapshot_of",
    "zone_of",
]
