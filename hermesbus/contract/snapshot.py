"""The context snapshot the conversation attaches at each state transition."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from hermesbus.contract.fields import FLOW_ID_RULE, Int32, Int64, Millis, NonEmpty, Record

__all__ = ["ContextSnapshot", "ToolCallTrace"]


class ToolCallTrace(Record):
    avro_name: ClassVar[str] = "hermes.mcp.ToolCallTrace"
    tool: str
    args_digest: str
    status_code: Int32


class ContextSnapshot(Record):
    """The conversation's snapshot at a state transition."""

    avro_name: ClassVar[str] = "hermes.mcp.ContextSnapshot"
    state_id: NonEmpty
    entered_at: Millis
    tokens_used: Annotated[Int64, Field(ge=0)] = 0
    summary: Annotated[str, Field(max_length=50)] = ""
    tool_calls: tuple[ToolCallTrace, ...] = ()
    flow: Annotated[str, Field(pattern=FLOW_ID_RULE)] | None = None
    """The registered flow the session runs; None: the built-in expense report."""
    flow_version: Annotated[Int32, Field(ge=1)] | None = None
    """The version of ``flow`` the session started with (it keeps it to its end)."""
