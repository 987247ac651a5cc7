"""Hooks of the test flows: pure functions of a session's values."""

from __future__ import annotations

from json import dumps  # imported here, defined elsewhere: never a hook
from typing import Any

__all__ = ["broken", "dumps", "fails", "greeting", "is_vip", "today"]


def is_vip(values: dict[str, Any]) -> bool:
    return str(values["entities"].get("contract_no", "")).endswith("9")


def greeting(values: dict[str, Any]) -> str:
    values["user"]["id"] = "changed"  # a copy: the session's values are not touched
    return "你好"


def broken(values: dict[str, Any]) -> Any:
    return {1, 2}  # no JSON for a set


def today(values: dict[str, Any]) -> str:
    return str(values["turn"]["at"])[:10]  # the turn's date: no clock


def fails(values: dict[str, Any]) -> Any:
    raise RuntimeError("a bug in a team's hook")
