"""What a spec file says about an MCP server's tools, and the tool specs it makes of a listing.

A server offers its tools' names, descriptions and schemas; admission needs more than
that: a verifier, a fallback and a probe call, which only the operator can say. The spec
file (YAML) says them once for all the server's tools (``defaults``) and per tool
(``tools``)::

    server: demo                      # names the server: its shared session and stderr log
    env: [HERMES_DEMO_SIGNING_KEY]    # stdio: the variables the server may see
    probe: {tool: probe}              # the declared probe call (per tool: arguments)
    defaults:
      fallback: {strategy: cache, stale_after_s: 600}
    tools:
      org_tool:
        verifier: mypkg.checks:org_verify
        probe: {arguments: {tool: org_tool}}
    skip: [probe]                     # offered, not admitted

Every offered tool not skipped is admitted, under its own name made a tool name
(lowercase, other characters ``_``) or the ``name:`` given. A tool's description and
schemas come from the server and are pinned with it; ``output_schema`` may be given only
for a tool whose server declares none (its results' text is then the JSON checked).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermesbus.errors import AdmissionError, ConfigError
from hermesbus.processors.tool._mcp import definition_of, pin_of
from hermesbus.processors.tool._spec import McpBinding, McpServer, ToolSpec, tool_name_problem

__all__ = ["McpDocument", "ProbeCall", "mcp_specs"]

_OWN: Final = frozenset({"name", "probe"})
_GIVEN_BY_SERVER: Final = frozenset(
    {"kind", "target", "mcp", "input_schema", "description", "health", "call_path", "workers"}
)
"""Fields a spec file may not set for an MCP tool: the server (or the command line) says them."""
_SERVER_WIDE: Final = frozenset({"env", "memory_limit_mb"})


class ProbeCall(BaseModel):
    """The declared probe call: a tool of the server and its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)


class McpDocument(BaseModel):
    """A spec file for an MCP server's tools (see the module's description)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str
    env: tuple[str, ...] = ()
    memory_limit_mb: int = Field(default=2048, gt=0)
    probe: ProbeCall = ProbeCall()
    defaults: dict[str, Any] = Field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = Field(default_factory=dict)
    skip: tuple[str, ...] = ()

    @classmethod
    def of(cls, document: Mapping[str, Any], where: str) -> McpDocument:
        try:
            return cls.model_validate(dict(document))
        except ValidationError as exc:
            lines = _said(exc, sep="\n  ")
            raise ConfigError(f"{where}: not an MCP spec file:\n  {lines}") from exc


def tool_name_for(offered: str) -> str:
    """An offered tool's name as a tool name: lowercase, any other character ``_``."""
    return re.sub(r"[^a-z0-9_]", "_", offered.lower())


def mcp_specs(
    document: McpDocument, server: McpServer, listing: list[types.Tool]
) -> list[ToolSpec]:
    """The specs of the offered tools (pinned to their definitions now); AdmissionError
    naming every problem (a tool the file names is not offered, a field it may not set,
    a name that is no tool name, two tools under one name)."""
    offered = {tool.name: tool for tool in listing}
    problems = [
        f"tools.{name}: the server {server.name} offers no such tool (it offers "
        f"{', '.join(sorted(offered)) or 'none'})"
        for name in [*document.tools, *document.skip]
        if name not in offered
    ]
    for where, fields in [("defaults", document.defaults)] + [
        (f"tools.{name}", entry) for name, entry in document.tools.items()
    ]:
        refused = sorted(set(fields) & (_GIVEN_BY_SERVER | _SERVER_WIDE))
        if refused:
            problems.append(f"{where}: {', '.join(refused)} cannot be set per tool here")
    specs: list[ToolSpec] = []
    for tool in listing:
        if tool.name in document.skip:
            continue
        entry = {**document.defaults, **document.tools.get(tool.name, {})}
        made = _spec(document, server, tool, entry)
        if isinstance(made, str):
            problems.append(made)
        else:
            specs.append(made)
    names = [spec.name for spec in specs]
    problems += [
        f"two offered tools would both be {name!r}: give one a name: in tools:"
        for name in sorted({n for n in names if names.count(n) > 1})
    ]
    if problems:
        raise AdmissionError(f"MCP server {server.name} refused: " + "; ".join(problems))
    return specs


def _spec(
    document: McpDocument, server: McpServer, tool: types.Tool, entry: dict[str, Any]
) -> ToolSpec | str:
    name = str(entry.get("name") or tool_name_for(tool.name))
    if (problem := tool_name_problem(name)) is not None:
        return f"tools.{tool.name}: {problem}; give it a name: in tools:"
    probe = _probe_of(document, tool, entry)
    if isinstance(probe, str):
        return probe
    definition = definition_of(tool)
    output_schema = tool.output_schema
    if output_schema is not None and "output_schema" in entry:
        return f"tools.{tool.name}: its server declares an output schema; it cannot be replaced"
    fields = {k: v for k, v in entry.items() if k not in _OWN}
    fields.setdefault("output_schema", output_schema)
    binding = McpBinding(
        server=server,
        tool=tool.name,
        definition=definition,
        pin=pin_of(definition),
        probe_tool=probe.tool or tool.name,
        probe_arguments=probe.arguments,
    )
    try:
        return ToolSpec.model_validate(
            {
                **fields,
                "name": name,
                "kind": "mcp",
                "target": server.where,
                "description": tool.description or "",
                "input_schema": tool.input_schema,
                "env": document.env,
                "mcp": binding,
            }
        )
    except ValidationError as exc:
        return f"tools.{tool.name}: {_said(exc)}"


def _probe_of(document: McpDocument, tool: types.Tool, entry: dict[str, Any]) -> ProbeCall | str:
    """The tool's declared probe call (the server's, with the tool's own over it), or why
    there is none."""
    if "probe" not in document.model_fields_set and "probe" not in entry:
        return (
            f"tools.{tool.name}: no probe call declared (probe: {{tool: NAME, arguments: "
            "{...}}, for the server or per tool)"
        )
    own = entry.get("probe", {})
    if not isinstance(own, dict):
        return f"tools.{tool.name}.probe: a mapping (tool:, arguments:), not {own!r}"
    try:
        return ProbeCall.model_validate({**document.probe.model_dump(), **own})
    except ValidationError as exc:
        return f"tools.{tool.name}.probe: {_said(exc)}"


def _said(exc: ValidationError, sep: str = "; ") -> str:
    """Each invalid field as ``where: what is wrong``."""
    return sep.join(
        f"{'.'.join(str(p) for p in e['loc']) or '(the whole file)'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )
