"""Hooks of the test flows: pure functions of a session's values."""

from __future__ import annotations

from typing import Any


def is_vip(values: dict[str, Any]) -> bool:
    return str(values["entities"].get("contract_no", "")).endswith("9")


def greeting(values: dict[str, Any]) -> str:
    values["user"]["id"] = "changed"  # a copy: the session's values are not touched
    return "你好"


def broken(values: dict[str, Any]) -> Any:
    return {1, 2}  # no JSON for a set
