"""The conversation processor: the S1-S5 state machine of seed 000 §2 over the bus.

``handle`` is the processor's handler (name ``conversation``, topic
``hermes.conversation.in``); ``build_ports`` gives its ports from the ``HERMES_LLM_*``
settings. The state machine is data (``MACHINE``); intent parsing is a port
(``IntentParser``: ``RuleIntentParser`` by default, ``HttpIntentParser`` when configured).
"""

from ._context import UNFINISHED_LABEL
from ._flow import report_id
from ._handler import NAME, TIMER_SOURCE, TOPIC, handle
from ._history import (
    HISTORY_BUDGET_TOKENS,
    History,
    Message,
    estimate_tokens,
    new_message,
    render_pinned,
)
from ._intent import (
    Intent,
    IntentName,
    IntentParser,
    RuleIntentParser,
    normalise_city,
    relative_period,
)
from ._llm import HttpIntentParser
from ._machine import (
    MACHINE,
    STATE_SPECS,
    TRANSITION_TABLE,
    Machine,
    StateSpec,
    Timeout,
    Transition,
    TransitionError,
)
from ._session import Session, canonical_json, digest, snapshot_of
from ._settings import INTENT_PORT, ConversationSettings, build_ports

__all__ = [
    "HISTORY_BUDGET_TOKENS",
    "INTENT_PORT",
    "MACHINE",
    "NAME",
    "STATE_SPECS",
    "TIMER_SOURCE",
    "TOPIC",
    "TRANSITION_TABLE",
    "UNFINISHED_LABEL",
    "ConversationSettings",
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
    "new_message",
    "normalise_city",
    "relative_period",
    "render_pinned",
    "report_id",
    "snapshot_of",
]
