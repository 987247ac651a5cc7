"""Tools that answer from a script: a test says what each tool returns and checks what it
was asked.

:class:`ScriptedTools` is a :class:`hermesbus.processors.tool.ToolPort`: handed to the
tool processor's handler in a :class:`hermesbus.testing.Harness`, it answers every call
from the script and keeps it. The demo's conversation tests answer the expense tools this
way. A running bus never uses it: there tools are registered and the tool processor runs
them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hermesbus.contract.payloads import ToolCall, ToolResult
from hermesbus.processors.protocol import NOT_REGISTERED, OK
from hermesbus.processors.tool import CallReport, Progress

__all__ = ["Script", "ScriptedTools"]

Script = Mapping[str, Any] | Callable[[ToolCall], ToolResult | Mapping[str, Any]]
"""A tool's answer: its result JSON (a mapping), or a function of the call returning a
``ToolResult`` or the result JSON."""


@dataclass
class ScriptedTools:
    """Tools that answer from ``script`` (tool name -> :data:`Script`); unknown tools get
    404. ``calls`` keeps every call, in order, with whether the fallback was asked for."""

    script: dict[str, Script] = field(default_factory=dict)
    steps: Mapping[str, Iterable[str]] = field(default_factory=dict)
    """Verification steps each tool reports (default: ``scripted``)."""
    calls: list[tuple[ToolCall, bool]] = field(default_factory=list)

    async def call(
        self,
        call: ToolCall,
        *,
        now: datetime,
        fallback: bool = False,
        timeout_ms: int = 0,
        progress: Progress | None = None,
    ) -> CallReport:
        self.calls.append((call, fallback))
        answer = self.script.get(call.tool)
        if answer is None:
            message = f"{call.tool} is not in the script ({sorted(self.script)})"
            return CallReport(ToolResult(tool=call.tool, status_code=NOT_REGISTERED, error=message))
        made = answer(call) if callable(answer) else answer
        if isinstance(made, ToolResult):
            return CallReport(made)
        steps = tuple(self.steps.get(call.tool, ("scripted",)))
        result = ToolResult(
            tool=call.tool,
            status_code=OK,
            result_json=json.dumps(dict(made), ensure_ascii=False, sort_keys=True),
            verified=True,
            verification_steps=steps,
        )
        return CallReport(result)

    def asked(self, tool: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``tool``, in order."""
        return [json.loads(c.arguments_json) for c, _ in self.calls if c.tool == tool]
