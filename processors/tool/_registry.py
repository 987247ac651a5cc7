"""The registry: admits a tool only when it can be discovered, verified and degraded.

A tool needs input and output JSON Schemas (http tools serve them at ``/schema``), a
health probe, a verifier and a fallback strategy; ``none`` only in debug mode. HTTP
tools (and http backups) must sit on a host of the allow-list (``HERMES_TOOL_HOSTS``),
without credentials in the URL, and their paths must stay under the base path; python
targets, probes, verifiers and backups must name a public callable (no part starting with
``_``) of a module of the allow-list (``HERMES_TOOL_MODULES``): their code runs with the
processor's rights. Tool names match ``TOOL_NAME_PATTERN``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from typing import Any

import httpx
import jsonschema

from hermesbus.errors import AdmissionError, ToolError
from hermesbus.processors.tool._http import join_url, path_problem
from hermesbus.processors.tool._mcp import pin_of
from hermesbus.processors.tool._settings import ToolSettings, module_allowed, private_part
from hermesbus.processors.tool._spec import (
    MAX_RESULT_CAP,
    Fallback,
    McpServer,
    ToolSpec,
    tool_name_problem,
)
from hermesbus.processors.tool._store import ToolStore
from hermesbus.processors.tool._verify import schema_error

__all__ = ["ToolRegistry", "refusal"]


class ToolRegistry:
    """Admission and lookup of tools; specs persist in the :class:`ToolStore`."""

    def __init__(
        self,
        store: ToolStore,
        settings: ToolSettings,
        *,
        debug: bool | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.debug = self.settings.debug if debug is None else debug
        self._client = client

    async def register(self, spec: ToolSpec) -> ToolSpec:
        """Admit and store ``spec`` (http schemas fetched from ``/schema``); else AdmissionError."""
        admitted = await self.admit(spec)
        await self.store.save_spec(admitted)
        return admitted

    async def admit(self, spec: ToolSpec) -> ToolSpec:
        """``spec`` as it would be stored (http schemas fetched), or AdmissionError; nothing
        is stored."""
        problems = self.runnable_problems(spec)
        if spec.kind == "mcp":
            problems += self._mcp_problems(spec)
        elif spec.kind == "http":
            problems += self._url_problems("base URL", spec.target)
            problems += [p for p in (path_problem("call_path", spec.call_path),) if p]
            if not problems and (spec.input_schema is None or spec.output_schema is None):
                spec, fetch_problem = await self._fetch_schemas(spec)
                problems += fetch_problem
        else:
            problems += _target_problems("python target", spec.target, self.settings.modules)
        problems += _schema_problems(spec) + _limit_problems(spec) + _sample_problems(spec)
        problems += self._probe_problems(spec)
        problems += _verifier_problems(spec, self.settings.modules)
        problems += self._fallback_problems(spec)
        if problems:
            raise AdmissionError(refusal(spec, problems))
        return spec

    def _mcp_problems(self, spec: ToolSpec) -> list[str]:
        """An MCP tool: its server can be started or reached, its pin is its definition's."""
        binding = spec.mcp
        if binding is None:
            return ["an mcp tool needs its server, tool name and pinned definition (mcp:)"]
        problems = self.server_problems(binding.server)
        if pin_of(binding.definition) != binding.pin:
            problems.append("the pin is not the digest of the pinned definition")
        if spec.fallback is not None and spec.fallback.strategy == "proxy":
            problems.append("fallback 'proxy' is not offered for MCP tools (cache or mock)")
        return problems

    def server_problems(self, server: McpServer) -> list[str]:
        """Why an MCP server cannot be started (stdio) or may not be reached (http)."""
        if server.transport == "stdio":
            if not server.command:
                return ["MCP server command is empty"]
            if shutil.which(server.command[0]) is None:
                return [
                    f"MCP server command {server.command[0]!r} is not an executable "
                    "(nor found on PATH)"
                ]
            return []
        if server.url is None:
            return ["MCP server over http needs its URL"]
        return self._url_problems("MCP server URL", server.url)

    def runnable_problems(self, spec: ToolSpec) -> list[str]:
        """Why ``spec`` may not run: its name is no tool name, or a callable it names
        (target, probe, verifier, backup) is private or in a module not on
        ``HERMES_TOOL_MODULES``; checked at admission and again before every call and probe
        (a spec may have been written to the store behind the registry)."""
        named = [("verifier", spec.verifier)]
        if spec.kind == "python":
            backup = spec.fallback.backup if spec.fallback else None
            named += [("python target", spec.target), ("health probe", spec.health)]
            named += [("proxy backup", backup)]
        problems = [p for p in (tool_name_problem(spec.name),) if p]
        allowed = ",".join(self.settings.modules) or "(none)"
        for what, target in named:
            if not target:
                continue
            if (private := private_part(target)) is not None:
                problems.append(
                    f"{what} {target!r} names the private {private!r}: a name starting "
                    "with _ is never a tool, probe or verifier"
                )
            elif not module_allowed(target, self.settings.modules):
                module = target.partition(":")[0]
                problems.append(
                    f"{what} module {module!r} is not on HERMES_TOOL_MODULES ({allowed})"
                )
        return problems

    async def get(self, name: str) -> ToolSpec | None:
        return await self.store.get_spec(name)

    def _url_problems(self, what: str, url: str) -> list[str]:
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            return [f"{what} {url!r} is not a URL ({exc})"]
        if parsed.scheme not in {"http", "https"} or not parsed.host:
            return [f"{what} {url!r} is not an http(s) URL"]
        if parsed.userinfo:
            return [f"{what} carries credentials (user:password@): pass secrets another way"]
        if parsed.host.lower() not in self.settings.hosts:
            allowed = ",".join(sorted(self.settings.hosts))
            return [f"{what} host {parsed.host!r} is not on HERMES_TOOL_HOSTS ({allowed})"]
        if parsed.query or parsed.fragment:
            return [f"{what} must not carry a query or fragment (paths are appended to it)"]
        problem = path_problem(f"{what} path", parsed.raw_path.decode("ascii").rstrip("/"))
        return [] if problem is None else [problem]

    async def _fetch_schemas(self, spec: ToolSpec) -> tuple[ToolSpec, list[str]]:
        try:
            url = join_url(spec.target, "/schema")
        except (ToolError, httpx.InvalidURL) as exc:
            return spec, [f"input/output schema: {exc}"]
        try:
            async with asyncio.timeout(spec.timeout_s):
                if self._client is not None:
                    response = await self._client.get(url, timeout=spec.timeout_s)
                else:
                    async with httpx.AsyncClient() as client:
                        response = await client.get(url, timeout=spec.timeout_s)
            response.raise_for_status()
            served: Any = response.json()
        except (httpx.HTTPError, ValueError, TimeoutError) as exc:
            return spec, [f"input/output schema: GET {url} failed ({exc!r})"]
        if not isinstance(served, dict):
            return spec, [f"input/output schema: GET {url} did not answer a JSON object"]
        update = {
            "input_schema": spec.input_schema or served.get("input") or served.get("input_schema"),
            "output_schema": spec.output_schema
            or served.get("output")
            or served.get("output_schema"),
        }
        return spec.model_copy(update=update), []

    def _probe_problems(self, spec: ToolSpec) -> list[str]:
        if spec.kind == "mcp":
            return []  # a ping and the declared probe call (mcp.probe_tool), always there
        if spec.kind == "http":
            problem = path_problem("health probe path", spec.health_path)
            return [] if problem is None else [problem]
        if not spec.health:
            return ["no health probe (a module:function returning latency_ms, success_rate, ...)"]
        return _target_problems("health probe", spec.health, self.settings.modules)

    def _fallback_problems(self, spec: ToolSpec) -> list[str]:
        fallback = spec.fallback
        if fallback is None:
            return ["no fallback strategy (cache, mock or proxy)"]
        if fallback.strategy == "none":
            return [] if self.debug else ["fallback 'none' is only admitted in debug mode"]
        if fallback.strategy == "cache":
            return [] if fallback.stale_after_s else ["fallback 'cache' needs stale_after_s"]
        if fallback.strategy == "mock":
            return _mock_problems(spec, fallback)
        return self._backup_problems(spec, fallback)

    def _backup_problems(self, spec: ToolSpec, fallback: Fallback) -> list[str]:
        if spec.kind == "mcp":
            return []  # named by _mcp_problems
        if not fallback.backup:
            return ["fallback 'proxy' needs a backup endpoint"]
        if spec.kind == "http":
            return self._url_problems("proxy backup", fallback.backup)
        return _target_problems("proxy backup", fallback.backup, self.settings.modules)


def _target_problems(what: str, target: str, prefixes: tuple[str, ...]) -> list[str]:
    """Whether ``module:function`` names a module that can be found (without running it:
    ``find_spec`` imports only the parent packages, and only of allowed modules)."""
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        return [f"{what} {target!r} is not module:function"]
    if private_part(target) is not None or not module_allowed(target, prefixes):
        return []  # named by runnable_problems
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return [f"{what} module {module!r} cannot be found ({exc})"]
    return [] if found is not None else [f"{what} module {module!r} cannot be found"]


def _limit_problems(spec: ToolSpec) -> list[str]:
    problems = []
    if spec.max_result_bytes > MAX_RESULT_CAP:
        problems.append(f"max_result_bytes {spec.max_result_bytes} is over {MAX_RESULT_CAP}")
    if spec.signature is not None and spec.signature.key_env in spec.env:
        problems.append(f"env must not pass the verification key {spec.signature.key_env}")
    return problems


def _schema_problems(spec: ToolSpec) -> list[str]:
    problems = []
    for what, schema in (("input", spec.input_schema), ("output", spec.output_schema)):
        if schema is None:
            problems.append(f"no {what} schema")
            continue
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            problems.append(f"{what} schema is not a valid JSON Schema ({exc.message})")
    return problems


def _verifier_problems(spec: ToolSpec, prefixes: tuple[str, ...]) -> list[str]:
    if not spec.verifier:
        return ["no verifier (a module:function taking the result, returning a bool)"]
    return _target_problems("verifier", spec.verifier, prefixes)


def _sample_problems(spec: ToolSpec) -> list[str]:
    if spec.sample_arguments is None or spec.input_schema is None:
        return []  # none given, or reported as a missing input schema
    try:
        problem = schema_error(spec.input_schema, spec.sample_arguments)
    except jsonschema.exceptions.SchemaError:
        return []  # reported as an invalid input schema
    return [] if problem is None else [f"sample_arguments break the input schema ({problem})"]


def _mock_problems(spec: ToolSpec, fallback: Fallback) -> list[str]:
    if fallback.mock_result is None:
        return ["fallback 'mock' needs a mock_result"]
    if spec.output_schema is None:
        return []  # reported as a missing output schema
    try:
        problem = schema_error(spec.output_schema, fallback.mock_result)
    except jsonschema.exceptions.SchemaError:
        return []  # reported as an invalid output schema
    return [] if problem is None else [f"mock_result breaks the output schema ({problem})"]


def refusal(spec: ToolSpec, problems: list[str]) -> str:
    """Why ``spec`` is refused, as admission and a call of a no longer admissible tool say it."""
    return f"tool {spec.name!r} refused: " + "; ".join(problems)
