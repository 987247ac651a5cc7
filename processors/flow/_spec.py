"""A flow as data: the models of a flow spec file (its JSON Schema is generated from them).

A flow is a finite set of explicit states (document 000 §2): each with the actions it takes
on entering, the waits it keeps, where a failure leaves to (its exception exit) and the time
the dispatcher gives its tool calls; transitions move from state to state on a trigger,
guarded by hooks. What a spec cannot say goes into hooks: pure functions named
``module:function`` from the allow-listed modules, given the session's context.

Texts are templates: ``{root.path}`` takes a value from the session's context (roots in
:data:`ROOTS`), ``{{`` and ``}}`` are braces. Nothing else is evaluated.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Annotated, Any, Final, Literal

import re2
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from hermesbus.contract.fields import FLOW_ID_RULE
from hermesbus.processors.tool import TOOL_NAME_PATTERN

__all__ = [
    "FLOW_ID_PATTERN",
    "INSTANT_ACTIONS",
    "NAME_PATTERN",
    "ROOTS",
    "STATE_PATTERN",
    "SUMMARY_MAX",
    "Action",
    "Agent",
    "ArmAction",
    "Call",
    "CallAction",
    "CarryAction",
    "Confirmation",
    "Decide",
    "DecideAction",
    "DisarmAction",
    "Entity",
    "FactWrite",
    "FailAction",
    "Failure",
    "FlowSpec",
    "HookAction",
    "HookCall",
    "Instant",
    "Intent",
    "ItemWrite",
    "Parallel",
    "ParallelAction",
    "PatternEntity",
    "PinAction",
    "PreferenceWrite",
    "Preload",
    "RememberAction",
    "RememberDeclined",
    "RememberFact",
    "RememberItem",
    "RememberPreference",
    "RememberSymbol",
    "Reply",
    "ReplyAction",
    "SetAction",
    "SnapshotHook",
    "State",
    "SymbolWrite",
    "Transition",
    "Wait",
    "duration_ms",
    "pattern_of",
    "placeholders",
    "placeholders_in",
]

FLOW_ID_PATTERN: Final = FLOW_ID_RULE
NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,39}$"
"""Intents, triggers, waits, hooks, entities, symbols and context keys."""
STATE_PATTERN: Final = r"^[A-Za-z][A-Za-z0-9_.-]{0,15}$"
"""State ids: ``S1``, ``S3.1``, ``ask_table``."""
DURATION_PATTERN: Final = r"^[1-9][0-9]{0,8}(ms|s|m|h)$"
HOOK_TARGET_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
SUMMARY_MAX: Final = 50
"""A snapshot's summary is at most this many characters (the envelope's contract)."""
ROOTS: Final = frozenset(
    {
        "user",
        "session",
        "turn",
        "entities",
        "symbols",
        "context",
        "results",
        "hooks",
        "intent",
        "attachments",
        "memory",
        "facts",
        "failure",
    }
)
"""What a template may read: the user's and session's ids, the turn's id and time
(``turn.at``, ISO 8601: hooks read the date here, never from a clock), the user's last
turn's intent, entities and attachments (a list of name, media_type, uri, sha256), the
session's short-term symbols and context, the tool results, hook values, what memory
answered (confirmed ``memory.preferences``, unconfirmed ``memory.candidates``), the pinned
``facts``, and in a state's ``failure:`` actions what failed (``failure.text``: what the
user would be told, ``failure.component``, ``failure.code``)."""

_PLACEHOLDER: Final = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_PATH: Final = re.compile(r"^[a-z]+(\.[A-Za-z0-9][A-Za-z0-9_]*)*$")
"""``root.key.key``: keys of the context only (none starts with ``_``: no attribute)."""
_STRIPPED: Final = re.compile(r"[\s,.!;:，。！；：、~\"'“”?？]+")
_UNITS: Final = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


def _template(text: str) -> str:
    placeholders(text)
    return text


def _templates_in(value: Any) -> Any:
    placeholders_in(value)
    return value


def _values(values: dict[str, Any]) -> dict[str, Any]:
    _templates(values)
    return values


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
StateId = Annotated[str, Field(pattern=STATE_PATTERN)]
ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
Duration = Annotated[
    str, Field(pattern=DURATION_PATTERN, description="A number and ms, s, m or h: 30s, 5m.")
]
Template = Annotated[
    str,
    Field(min_length=1, max_length=2_000, description="Text with {root.path} values."),
    AfterValidator(_template),
]
"""Text whose placeholders are checked when the spec is read (see :func:`placeholders`)."""
Values = Annotated[dict[str, Any], AfterValidator(_values)]
"""JSON whose strings are templates (a tool's arguments, a preloaded context)."""


def _one_placeholder(text: str) -> str:
    found = placeholders(text)
    if len(found) != 1 or text != "{" + found[0] + "}":
        raise ValueError(f"{text!r} is not one placeholder ({{root.path}}) alone")
    return text


Placeholder = Annotated[
    str,
    Field(min_length=3, max_length=200, description="One {root.path} whose value is used."),
    AfterValidator(_one_placeholder),
]
"""A value taken whole from the session's values (a hook's answer, a result)."""


def _arguments(value: dict[str, Any] | str) -> dict[str, Any] | str:
    if isinstance(value, str):
        return _one_placeholder(value)
    return _values(value)


Arguments = Annotated[dict[str, Any] | str, AfterValidator(_arguments)]
"""A tool's arguments: JSON whose strings are templates, or one placeholder's object."""
ContextValues = Annotated[
    dict[Annotated[str, Field(pattern=NAME_PATTERN)], Any],
    Field(min_length=1, max_length=32),
    AfterValidator(_values),
]
"""Context keys (names) and JSON whose strings are templates."""
Button = Annotated[str, Field(min_length=1, max_length=20)]


def placeholders(template: str) -> list[str]:
    """The ``{root.path}`` placeholders of ``template``; ValueError names a malformed one
    (an unknown root, an expression, a lone brace)."""
    found = []
    for match in _PLACEHOLDER.finditer(template):
        text = match.group(0)
        if text in ("{{", "}}"):
            continue
        path = match.group(1)
        if path is None:
            raise ValueError(f"a lone {text!r} (write {text * 2} for a brace)")
        if not _PATH.fullmatch(path) or path.split(".")[0] not in ROOTS:
            roots = ", ".join(sorted(ROOTS))
            raise ValueError(f"{{{path}}} is not {{root.path}} with a root of {roots}")
        found.append(path)
    return found


def duration_ms(duration: str) -> int:
    """``30s`` -> 30000."""
    unit = next(u for u in ("ms", "s", "m", "h") if duration.endswith(u))
    return int(duration.removesuffix(unit)) * _UNITS[unit]


def _templates(value: Any) -> None:
    placeholders_in(value)


def placeholders_in(value: Any, path: str = "") -> list[str]:
    """The placeholders of every string inside ``value`` (arguments: nested JSON); a
    malformed one is a ValueError naming where (``b.c[0]``)."""
    if isinstance(value, str):
        try:
            return placeholders(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}" if path else str(exc)) from None
    if isinstance(value, dict):
        items = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{n}]", item) for n, item in enumerate(value)]
    else:
        return []
    return [found for at, item in items for found in placeholders_in(item, at)]


def pattern_of(pattern: str) -> Any:
    """``pattern`` compiled by RE2, which matches in time linear in the text: a pattern runs
    on what users type, so none may backtrack without end. ValueError says why it does
    not compile (RE2 has no backreferences and no lookaround)."""
    return _compiled(pattern)


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is raised, not printed
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"{pattern!r} is not a regular expression RE2 runs (no backreferences, no "
            f"lookaround): {reason}"
        ) from None


def _regex(pattern: str) -> str:
    """``pattern`` if it is a regular expression in Python's syntax that RE2 also runs
    (RE2 reads ``a{99999999999}`` as text, Python refuses it); ValueError saying why not."""
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    pattern_of(pattern)
    return pattern


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Act(_Spec):
    when: Name | None = Field(
        default=None, description="A hook that must return true for the action to run."
    )


class Call(_Spec):
    """One tool call; its arguments are JSON whose strings are templates (a string that
    is one placeholder alone passes the value itself, not its text)."""

    tool: ToolName
    args: Arguments = Field(
        default_factory=dict, description="An object of templates, or one placeholder's object."
    )
    into: Name | None = Field(
        default=None, description="The results key (default: the tool's name)."
    )
    task: Name | None = Field(
        default=None, description="The cycle's name in traces (default: <state>#<action>)."
    )
    preferences: list[Name] = Field(
        default_factory=list,
        max_length=16,
        description="Preferences memory is asked for with the call: {memory.preferences.x}.",
    )
    symbols: list[Name] = Field(
        default_factory=list,
        max_length=16,
        description="Short-term symbols memory checks before the call (beyond its arguments').",
    )
    context: ContextValues | None = Field(
        default=None, description="Values the cycle's envelopes carry (templates)."
    )


class Parallel(_Spec):
    """Calls sent together as one cycle, answered together within one budget."""

    budget_ms: int = Field(gt=0, le=600_000)
    calls: list[Call] = Field(min_length=2, max_length=16)
    task: Name | None = Field(
        default=None, description="The cycle's name in traces (default: <state>#<action>)."
    )
    preferences: list[Name] = Field(default_factory=list, max_length=16)
    symbols: list[Name] = Field(default_factory=list, max_length=16)
    context: ContextValues | None = None


class Reply(_Spec):
    """A message to the user, with buttons (their labels are what a press sends)."""

    text: Template
    buttons: list[Button] = Field(default_factory=list, max_length=6)
    steps: list[Name] | None = Field(
        default=None,
        description=(
            "The cycles (tasks) whose verification steps it carries; default: those of the "
            "results no reply has carried yet."
        ),
    )


class SymbolWrite(_Spec):
    """A short-term symbol of the session ("这两个表" -> A and B), checked by memory's
    ``validator`` each time it is read back (``present``: not expired; ``graph``: a live,
    verified node of the graph), dropped after ``ttl_s``."""

    name: Name
    value: Template
    ttl_s: int = Field(default=600, gt=0, le=86_400)
    validator: Name = "present"


class PreferenceWrite(_Spec):
    """A choice the user made: memory counts it, and a choice made often becomes a candidate
    (``{memory.candidates.x}``) to ask about. ``confirmed``: the user said yes to keeping it
    as a preference, written with that answer as its proof (only in the ``do:`` of a move on
    the user's answer)."""

    name: Name
    value: Annotated[Any, AfterValidator(_templates_in)]
    confirmed: bool = False


class FactWrite(_Spec):
    """A long-term graph fact, written only when ``verified_by`` (a tool) verifies it."""

    subject: Template
    relation: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,39}$")]
    object: Template
    verified_by: ToolName


class ItemWrite(_Spec):
    """A mid-term item (an unfinished piece of work, a note): ``key`` (never a preference's,
    a choice's or a flow snapshot's), JSON ``value``, its ``importance`` and lifetime."""

    key: Template
    value: Annotated[Any, AfterValidator(_templates_in)]
    importance: float = Field(default=0.5, ge=0, le=1)
    ttl_s: int = Field(default=30 * 24 * 3600, gt=0, le=366 * 24 * 3600)


class RememberItem(_Spec):
    item: ItemWrite | Placeholder = Field(
        description="An item, or one placeholder whose value is one (null: nothing written)."
    )


class RememberDeclined(_Spec):
    """The user said no to keeping a candidate preference: it is not asked about again in
    this session (nothing is written)."""

    declined: Name


class RememberSymbol(_Spec):
    symbol: SymbolWrite


class RememberPreference(_Spec):
    preference: PreferenceWrite


class RememberFact(_Spec):
    fact: FactWrite


class HookCall(_Spec):
    """A hook's value, kept as ``hooks.<into>`` (default: its name) for templates and guards."""

    name: Name
    into: Name | None = None


class Decide(_Spec):
    """A hook chooses the state's next move: its answer is one of ``moves`` (the trigger
    taken at once, the actions after it left undone) or null (the actions go on)."""

    hook: Name
    moves: list[Name] = Field(min_length=1, max_length=16)


class CallAction(_Act):
    call: Call


class ParallelAction(_Act):
    parallel: Parallel


class ReplyAction(_Act):
    reply: Reply


class RememberAction(_Act):
    remember: (
        RememberSymbol | RememberPreference | RememberFact | RememberItem | RememberDeclined
    ) = Field(description="An object with one of symbol, preference, fact, item, declined.")


class HookAction(_Act):
    hook: HookCall


class DecideAction(_Act):
    decide: Decide


class SetAction(_Act):
    """Values written into the session's ``context`` (templates: ``{results.x.y}``), read
    by later templates, hooks and guards, and kept in the terminal state's snapshot; or one
    placeholder whose value (an object, a hook's answer) is merged in."""

    set: ContextValues | Placeholder


class PinAction(_Act):
    """Facts pinned in the session's history (``{facts.x}``): every history fold keeps
    them, and the token budget counts them; empty values are not pinned."""

    pin: ContextValues | Placeholder


class ArmAction(_Act):
    """(Re)start a wait of the state (one of ``auto: false``, or restart one)."""

    arm: Name


class DisarmAction(_Act):
    disarm: Name


class Failure(_Spec):
    """A failure the flow declares (a tool said yes, the answer says no): the state's way
    out is taken as for a tool's failure, ``text`` told (default: component and code)."""

    component: Template
    code: Template
    message: Template
    text: Template | None = None


class FailAction(_Act):
    fail: Failure


class CarryAction(_Act):
    """Values every later cycle's envelopes carry (what the user has stated, for memory
    and tools to read: a tolerance, a locale)."""

    carry: ContextValues


Action = (
    CallAction
    | ParallelAction
    | ReplyAction
    | RememberAction
    | HookAction
    | DecideAction
    | SetAction
    | PinAction
    | ArmAction
    | DisarmAction
    | CarryAction
    | FailAction
)
"""One on-enter action: an object with exactly one of call, parallel, reply, remember, hook,
decide, set, pin, arm, disarm, carry, fail."""
Instant = (
    ReplyAction
    | SetAction
    | HookAction
    | RememberAction
    | PinAction
    | ArmAction
    | DisarmAction
    | CarryAction
)
INSTANT_ACTIONS: Final = (
    ReplyAction,
    SetAction,
    HookAction,
    RememberAction,
    PinAction,
    ArmAction,
    DisarmAction,
    CarryAction,
)
"""The classes of :data:`Instant` (what ``isinstance`` checks)."""
"""An action of a move (``do:``): done at once, never a call (a fact, which its tool
verifies, is refused by the lint)."""


class Wait(_Spec):
    """A durable wait: ``after`` entering the state, ``trigger`` fires (unless the state
    was left), and the user is told ``text``."""

    id: Name
    after: Duration
    trigger: Name
    text: Template | None = None
    buttons: list[Button] = Field(default_factory=list, max_length=6)
    auto: bool = Field(
        default=True, description="Armed on entering the state; false: only by an arm action."
    )


class Confirmation(_Spec):
    """What passes a confirmation state: a press of one of ``buttons`` or a message that
    is, as a whole, one of ``answers`` (never a keyword inside a longer text); it fires
    ``trigger``. Anything else asks again."""

    buttons: list[Button] = Field(min_length=1, max_length=6)
    answers: list[Annotated[str, Field(min_length=1, max_length=10)]] = Field(
        default_factory=list, max_length=32
    )
    trigger: Name = "confirmed"
    intents: list[Name] = Field(
        default_factory=list,
        description="When given, an answer passes only if the flow reads it as one of these.",
    )


class SnapshotHook(_Spec):
    """A terminal state's record written by a hook: it answers an item (``key``, ``value``,
    ``importance``, ``ttl_s``) or null."""

    hook: Name


class Preload(_Spec):
    """A frequent path's default (document 000 §2): once the state's path has completed
    ``after`` times in this flow version, ``context`` is preloaded on entering it."""

    after: int = Field(default=100, gt=0)
    context: Values = Field(min_length=1)


class Agent(_Spec):
    """A model chooses the state's tools (an agent state): given the prompt, the user's turn
    and the allow-listed tools' input schemas, it calls tools round by round, each round's
    calls an ordinary cycle, until it answers in text; that text goes into ``results.<into>``
    (and to the user with ``reply``) and the state's ``done`` move is taken. Past
    ``max_rounds`` model requests or ``max_tokens`` the state fails (its exit)."""

    prompt: Template = Field(description="The system prompt, a template over the session's values.")
    tools: list[ToolName] = Field(
        min_length=1, max_length=16, description="The only tools the model is offered and may run."
    )
    max_rounds: int = Field(default=4, ge=1, le=16, description="Model requests at most.")
    max_tokens: int = Field(
        default=4_000, ge=100, le=200_000, description="Tokens all its requests may use."
    )
    into: Name = Field(default="agent", description="The results key of the model's answer.")
    reply: bool = Field(default=True, description="Say the model's answer to the user.")


class State(_Spec):
    id: StateId
    name: str = Field(min_length=1, max_length=60)
    kind: Literal["step", "confirmation", "terminal", "agent"] = "step"
    agent: Agent | None = Field(
        default=None, description="Kind agent: the model that chooses the state's tools."
    )
    timeout_ms: int | None = Field(
        default=None, gt=0, le=600_000, description="The dispatcher's budget for its calls."
    )
    on_enter: list[Action] = Field(default_factory=list, max_length=32)
    waits: list[Wait] = Field(default_factory=list, max_length=8)
    exit: StateId | None = Field(default=None, description="The exception exit.")
    failure: list[Instant] = Field(
        default_factory=list,
        max_length=16,
        description="Done on taking the exit, in place of telling the user {failure.text}.",
    )
    on_turn: Decide | None = Field(
        default=None,
        description=(
            "A hook that reads each turn in this state and names its move (one of its moves) "
            "or null (the intent's move, else any)."
        ),
    )
    on_timeout: Name | None = Field(
        default=None,
        description="The move a cycle that ran out of its budget takes (else the exit).",
    )
    confirm: Confirmation | None = None
    summary: Template | None = None
    snapshot: bool | SnapshotHook = Field(
        default=True,
        description=(
            "Terminal states: the session's snapshot into mid-term memory as it ends; or a "
            "hook that answers the item to write (null: none)."
        ),
    )
    preload: Preload | None = None


class Transition(_Spec):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    source: StateId = Field(alias="from")
    on: Name
    to: StateId | None = Field(
        default=None, description="The state entered; none: the session stays (do: only)."
    )
    when: Name | None = Field(default=None, description="A hook that must return true.")
    unless: Name | None = Field(default=None, description="A hook that must return false.")
    do: list[Action] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Done on taking the move: after entering ``to`` and before its on_enter (actions "
            "done at once); a move that stays may call tools and decide too."
        ),
    )

    @model_validator(mode="after")
    def _does_something(self) -> Transition:
        if self.to is None and not self.do:
            raise ValueError("a move names the state it enters (to:) or what it does (do:)")
        return self


class PatternEntity(_Spec):
    """An entity taken from the text by a regular expression (its first group, else the
    whole match)."""

    name: Name
    pattern: str = Field(min_length=1, max_length=500)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        return _regex(pattern)


class Entity(_Spec):
    """An entity a built-in extractor finds: a city, a period ("上个月": the calendar month
    before the turn's time), a number."""

    name: Name
    builtin: Literal["city", "period", "number"]


class Intent(_Spec):
    name: Name
    phrases: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list)
    patterns: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list
    )
    entities: list[Annotated[PatternEntity | Entity, Field(union_mode="left_to_right")]] = Field(
        default_factory=list
    )
    answers: list[Annotated[str, Field(min_length=1, max_length=20)]] = Field(
        default_factory=list,
        max_length=64,
        description="Short answers that match only as the whole message (是, ok, 不用).",
    )
    label: str | None = Field(default=None, max_length=60, description="For the model parser.")
    description: str | None = Field(default=None, max_length=500)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        return [_regex(pattern) for pattern in patterns]

    @field_validator("answers")
    @classmethod
    def _answers_say_something(cls, answers: list[str]) -> list[str]:
        for answer in answers:
            if not _STRIPPED.sub("", unicodedata.normalize("NFKC", answer)):
                raise ValueError(f"answer {answer!r} is only punctuation: it would match anything")
        return answers

    @model_validator(mode="after")
    def _recognisable(self) -> Intent:
        if not self.phrases and not self.patterns and not self.answers:
            raise ValueError(f"intent {self.name!r} has no phrase, pattern or answer to match")
        return self


class FlowSpec(_Spec):
    """A flow: ``flow`` (its id) and ``version`` name it; ``start`` is the state a new
    session enters; ``timeout_ms`` is the dispatcher's budget for a state that names none."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        title="hermesbus flow",
        json_schema_extra={"$id": "https://hermesbus.dev/schemas/flow-1.json"},
    )

    flow: Annotated[str, Field(pattern=FLOW_ID_PATTERN)]
    version: int = Field(ge=1)
    title: str | None = Field(default=None, max_length=80)
    description: str | None = Field(default=None, max_length=2_000)
    start: StateId
    timeout_ms: int = Field(default=5_000, gt=0, le=600_000)
    intents: list[Intent] = Field(default_factory=list, max_length=64)
    hooks: dict[Name, Annotated[str, Field(pattern=HOOK_TARGET_PATTERN)]] = Field(
        default_factory=dict, description="name -> module:function (allow-listed modules)."
    )
    summary: Name | None = Field(
        default=None,
        description="A hook that writes every snapshot's summary, in place of the states'.",
    )
    begin: list[Instant] = Field(
        default_factory=list,
        max_length=16,
        description="Done as a session begins, before it enters start (pin what it said).",
    )
    parser: Name | None = Field(
        default=None,
        description=(
            "A hook that reads each turn ({turn.text}) and answers {intent, entities}, in "
            "place of the intents' answers, phrases and patterns."
        ),
    )
    states: list[State] = Field(min_length=1, max_length=64)
    transitions: list[Transition] = Field(default_factory=list, max_length=512)

    def state(self, state_id: str) -> State | None:
        return next((s for s in self.states if s.id == state_id), None)

    def budget_of(self, state_id: str) -> int:
        """The time a cycle of ``state_id`` is given: its own ``timeout_ms``, else the flow's."""
        state = self.state(state_id)
        own = state.timeout_ms if state is not None else None
        return own if own is not None else self.timeout_ms
