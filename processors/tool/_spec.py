"""What a tool is: its kind, schemas, probe, verifier, fallback and limits.

Every part the registry requires is optional here, so that the registry (not pydantic)
refuses an incomplete spec with an :class:`~hermesbus.errors.AdmissionError` naming
what is missing.
"""

from __future__ import annotations

import functools
import re
import shlex
from typing import Annotated, Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hermesbus.processors.protocol import ToolHealth

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "MAX_RESULT_CAP",
    "MAX_WORKERS",
    "ROLE_PATTERN",
    "TOOL_NAME_PATTERN",
    "Access",
    "Fallback",
    "McpBinding",
    "McpServer",
    "Quota",
    "RateLimit",
    "SignatureConfig",
    "SignedResult",
    "ToolKind",
    "ToolSpec",
    "spec_from_json",
    "tool_name_problem",
]

DEFAULT_MAX_RESULT_BYTES = 16 * 1024
MAX_RESULT_CAP = 1024 * 1024
"""The largest ``max_result_bytes`` the registry admits."""
MAX_WORKERS = 32
"""The most worker processes one python tool may have."""

TOOL_NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,63}$"
"""Every tool's name: a lowercase letter, then up to 63 lowercase letters, digits or ``_``
(``org_tool``, ``rule_engine_tool``): it keys the store and names the ``tool:<name>``
address and the worker, so it holds no dot, slash, dash or space (``..`` is no name)."""
_TOOL_NAME: Final = re.compile(TOOL_NAME_PATTERN)


def tool_name_problem(name: str) -> str | None:
    """Why ``name`` is not a tool name (None: it is); the one check of every tool name."""
    if _TOOL_NAME.fullmatch(name):
        return None
    return (
        f"tool name {name!r} does not match {TOOL_NAME_PATTERN} "
        "(a lowercase letter, then up to 63 lowercase letters, digits or _)"
    )


ToolKind = Literal["python", "http", "mcp"]
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
SignatureAlg = Literal["hmac-sha256", "ed25519"]
Strategy = Literal["cache", "mock", "proxy", "none"]
_DEFAULTS = ToolHealth(tool="-", latency_ms=0.0, success_rate=1.0)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SignatureConfig(_Frozen):
    """How results are signed; ``key_env`` NAMES the variable holding the key, never the key.

    ``hmac-sha256``: the variable holds the shared secret, signatures are hex.
    ``ed25519``: it holds the public key (base64 of the 32 raw bytes, or PEM), signatures
    are base64.
    """

    alg: SignatureAlg
    key_env: Annotated[str, Field(pattern=_ENV_NAME)]


class Fallback(_Frozen):
    """What answers when the tool is unhealthy or its call fails."""

    strategy: Strategy
    stale_after_s: Annotated[float, Field(gt=0)] | None = None
    """``cache``: the newest cached result older than this is not used."""
    mock_result: Any = None
    """``mock``: the JSON returned; it must validate against the output schema."""
    backup: str | None = None
    """``proxy``: a URL (http tools) or ``module:function`` (python tools)."""


ROLE_PATTERN: Final = r"^[a-z][a-z0-9_-]{0,39}$"
"""A role a user holds (``has_role`` -> ``role:<name>`` in long-term memory)."""


class RateLimit(_Frozen):
    """At most ``calls`` calls by one user within any ``per_s`` seconds (sliding)."""

    calls: Annotated[int, Field(ge=1, le=1_000_000)]
    per_s: Annotated[int, Field(ge=1, le=86_400)]


class Quota(_Frozen):
    """At most ``calls`` calls by one user in each calendar ``per`` (UTC)."""

    calls: Annotated[int, Field(ge=1, le=100_000_000)]
    per: Literal["day", "month"]


class Access(_Frozen):
    """Who may call a tool, and how often (checked by the dispatcher before the call goes
    out). ``roles``: a user needs one of them among the roles memory holds for them as
    facts that one of the tools ``roles_from`` verified (a directory the operator trusts:
    no other tool's word makes anyone anything); empty: everyone. ``rate`` and ``quota``:
    per user, counted by the envelopes' times in the tool store, so a replay reads the
    decisions as recorded."""

    roles: tuple[Annotated[str, Field(pattern=ROLE_PATTERN)], ...] = ()
    roles_from: tuple[Annotated[str, Field(pattern=TOOL_NAME_PATTERN)], ...] = ()
    rate: RateLimit | None = None
    quota: Quota | None = None

    @model_validator(mode="after")
    def _roles_have_a_source(self) -> Access:
        if self.roles and not self.roles_from:
            raise ValueError("roles need roles_from: the tools whose verified facts grant them")
        return self


McpTransport = Literal["stdio", "http"]


class McpServer(_Frozen):
    """An MCP server whose tools are admitted: a child process spoken to over stdio
    (``command``, an argv list: never a shell string) or a streamable HTTP endpoint
    (``url``). One session per server is shared by its tools."""

    name: Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
    """Keys the shared session and names the server's stderr log."""
    transport: McpTransport
    command: tuple[str, ...] = ()
    url: str | None = None
    memory_limit_mb: Annotated[int, Field(gt=0)] = 2048
    """stdio: the address space the whole server process may use (RLIMIT_AS)."""

    @property
    def where(self) -> str:
        """The command line (stdio) or the URL, to show."""
        return shlex.join(self.command) if self.transport == "stdio" else str(self.url)


class McpBinding(_Frozen):
    """How a hermesbus tool is one tool of an MCP server, and the definition it is pinned to.

    ``definition`` is the tool as the server offered it when it was approved (name,
    title, description, input and output schemas, annotations), ``pin`` its digest. A
    server that later offers another definition has it recorded in ``offered`` (with
    ``offered_pin``): the tool is then unhealthy and answered by its fallback until
    ``hermesbus tools approve NAME``. ``alerted``: that change was alerted already."""

    server: McpServer
    tool: Annotated[str, Field(min_length=1)]
    """The tool's name on the server (any string the server uses)."""
    definition: dict[str, Any]
    pin: str
    probe_tool: Annotated[str, Field(min_length=1)]
    """The declared probe call: this tool of the server, with ``probe_arguments``; its
    structured answer may say ``latency_ms``, ``success_rate``, ``quota_remaining``."""
    probe_arguments: dict[str, Any] = Field(default_factory=dict)
    offered: dict[str, Any] | None = None
    offered_pin: str | None = None
    alerted: bool = False


class ToolSpec(_Frozen):
    """A tool as registered; ``target`` is ``module:function`` (python) or the base URL (http).

    HTTP tools answer ``POST {target}{call_path}`` (with an ``Idempotency-Key`` header),
    ``GET {target}/schema`` (``{"input": ..., "output": ...}``) and ``GET
    {target}{health}`` (``{"latency_ms", "success_rate", "quota_remaining"}``); python
    tools name a probe ``module:function`` and see the call's idempotency key in
    ``HERMES_IDEMPOTENCY_KEY`` while they run.
    Only successes are stored under the key: a call whose outcome is unknown (504) may
    run again on a retry, so a tool with side effects must honour the key itself.
    """

    name: str
    """Matches :data:`TOOL_NAME_PATTERN` (checked here and again at admission)."""
    kind: ToolKind
    target: Annotated[str, Field(min_length=1)]
    description: str = ""
    call_path: str = ""
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    health: str | None = None
    """python: the probe ``module:function``; http: the path (``/health`` when empty)."""
    verifier: str | None = None
    """``module:function`` taking the result JSON, returning a bool or raising."""
    fallback: Fallback | None = None
    signature: SignatureConfig | None = None
    mcp: McpBinding | None = None
    """mcp: the server, the tool's name there, its pinned definition and its probe call."""
    sample_arguments: dict[str, Any] | None = None
    """Arguments a call may be made with to check the tool: ``hermesbus tools chaos`` calls
    it with them under injected faults (checked against the input schema at admission)."""
    access: Access | None = None
    """Who may call the tool and how often (None: every user, without limit)."""
    sensitive_words: tuple[str, ...] = ()
    env: tuple[Annotated[str, Field(pattern=_ENV_NAME)], ...] = ()
    """python (and a stdio MCP server): the variables (names) passed to the worker besides
    PATH, HOME, LANG, LC_*, TZ and PYTHONPATH; never the signature's ``key_env``. The rest
    of the processor's environment (broker credentials, keys) is not visible to the tool."""
    timeout_s: Annotated[float, Field(gt=0)] = 10.0
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1
    """python: warm worker processes that run calls at once (started as they are needed);
    further calls wait for a free one, and the tool's health reports how many wait, so a
    deadline passed in that queue is told as a busy bus, not a failed tool."""
    memory_limit_mb: Annotated[int, Field(gt=0)] = 256
    """python: address space the worker may add after importing the tool (RLIMIT_AS)."""
    max_result_bytes: Annotated[int, Field(ge=256)] = DEFAULT_MAX_RESULT_BYTES
    slow_after_ms: float = _DEFAULTS.slow_after_ms
    unhealthy_after_ms: float = _DEFAULTS.unhealthy_after_ms
    min_success_rate: float = _DEFAULTS.min_success_rate
    estimate_s: int = _DEFAULTS.estimate_s

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        problem = tool_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        return name

    @property
    def health_path(self) -> str:
        return self.health or "/health"


class SignedResult(NamedTuple):
    """What a python tool returns to sign its result: the exact body and its signature.

    The worker only looks for ``body`` (bytes) and ``signature`` (str) attributes, so a
    tool may return any object with them without importing hermesbus.
    """

    body: bytes
    signature: str


@functools.lru_cache(maxsize=512)
def spec_from_json(text: str | bytes) -> ToolSpec:
    """A stored spec parsed once per distinct text: the tool processor reads a tool's spec
    for every call (a spec re-registered elsewhere takes effect at the next call), and the
    same text gives the same frozen object, so what is derived from it (a compiled schema,
    an executor) is found again by identity instead of being rebuilt."""
    return ToolSpec.model_validate_json(text)
