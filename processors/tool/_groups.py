"""One consumer group per tool, so a cycle's calls to different tools run in parallel.

A session's records run strictly in order within a consumer group; with one group for
all tools, a cycle's ``trip_tool`` and ``rule_engine_tool`` calls (S3's
parallel validation) would run one after the other. Each dedicated group handles only
its tool's calls; the ``tool`` group handles every tool without a group of its own (a
tool registered while the stack runs); :data:`MODEL_GROUP` handles agent states' model
rounds, which may take a model's while.
"""

from __future__ import annotations

from collections.abc import Collection

from hermesbus.processors.protocol import MODEL_ADDRESS, TOOL
from hermesbus.processors.tool._handler import NAME, handle
from hermesbus.runtime import Handler, HandlerInput, Outcome

__all__ = ["MODEL_GROUP", "group_name", "modelling", "serving"]


def group_name(tool: str) -> str:
    """The consumer group of a tool's own processor: ``tool-<name>``, injective.

    Lowercase letters, digits and ``_`` are kept; any other character becomes ``-`` and
    its code point in hex (``-`` + 2 digits below 256, ``--`` + 6 digits above), so two
    tool names never share a group (``Org.Tool`` -> ``tool--4frg-2e-54ool``)."""
    return f"{NAME}-" + "".join(_escaped(char) for char in tool)


def modelling() -> Handler:
    """The tool handler for agent states' model requests only (``model:chat``): a round
    may take the model's while, and no tool's calls wait behind it."""

    async def handle_models(inp: HandlerInput) -> Outcome:
        if inp.envelope.target != MODEL_ADDRESS:
            return Outcome(others=True)  # a tool's call: a tool's group answers it
        return await handle(inp)

    return handle_models


def _escaped(char: str) -> str:
    if char.isascii() and (char.islower() or char.isdigit() or char == "_"):
        return char
    code = ord(char)
    return f"-{code:02x}" if code < 256 else f"--{code:06x}"  # noqa: PLR2004 - one byte


def serving(tools: Collection[str], *, others: bool = False) -> Handler:
    """The tool handler for calls to ``tools`` only (``others``: to every tool but those)."""
    chosen = frozenset(tools)

    async def handle_some(inp: HandlerInput) -> Outcome:
        component, _, tool = inp.envelope.target.partition(":")
        if component != TOOL:  # the model's requests: their own group answers them
            return Outcome(others=True)
        if (tool in chosen) == others:
            return Outcome(others=True)  # another group's call: that group answers it
        return await handle(inp)

    return handle_some


MODEL_GROUP = group_name(MODEL_ADDRESS)
"""The consumer group of the model rounds (no tool name holds ``:``, so no tool's)."""
