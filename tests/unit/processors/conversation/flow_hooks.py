"""Hooks of the test flows: pure functions of a session's values."""

from __future__ import annotations

from json import dumps  # imported here, defined elsewhere: never a hook
from typing import Any

__all__ = [
    "aside",
    "broken",
    "claim_args",
    "claim_big_record",
    "claim_long",
    "claim_pay",
    "claim_record",
    "claim_refused",
    "claim_settled",
    "claim_summary",
    "claim_turn",
    "claim_who",
    "contract_state",
    "dumps",
    "elsewhere",
    "fails",
    "greeting",
    "is_vip",
    "reads_a_list",
    "reads_an_admin",
    "reads_nothing_known",
    "reads_only_its_own",
    "reads_submit",
    "today",
]


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


def contract_state(values: dict[str, Any]) -> str | None:
    """The move a contract's status decides: active, lapsed, or none (the flow says so)."""
    moves = {"生效中": "active", "已失效": "lapsed"}
    return moves.get(str(values["context"].get("status")))


def elsewhere(values: dict[str, Any]) -> str:
    return "elsewhere"  # not one of the decide's moves


def reads_submit(values: dict[str, Any]) -> dict[str, Any]:
    """提交 is a submission unless it is negated (不要提交, 先别提交): then a hold."""
    text = str(values["turn"]["text"])
    if "不要提交" in text or "别提交" in text:
        return {"intent": "hold", "entities": {}}
    if "提交" in text:
        return {"intent": "submit", "entities": {"files": str(values["turn"]["attachments"])}}
    return {"intent": None}


def reads_nothing_known(values: dict[str, Any]) -> dict[str, Any]:
    return {"intent": "dance"}


def reads_a_list(values: dict[str, Any]) -> dict[str, Any]:
    return {"intent": ["submit"]}  # not a name: refused, never a crash


def reads_an_admin(values: dict[str, Any]) -> dict[str, Any]:
    return {"intent": "submit", "entities": {"user_id": "admin"}}  # not the intent's entity


def reads_only_its_own(values: dict[str, Any]) -> dict[str, Any]:
    """提交 begins a submission, read only from what a new session may see."""
    if values.get("results") or values["session"]["state"]:
        raise ValueError(f"saw another flow's session: {sorted(values)}")
    return {"intent": "submit" if "提交" in str(values["turn"]["text"]) else None}


def aside(values: dict[str, Any]) -> str:
    return "side"


# -- the claim flow: what the expense report needs, on a flow of a team's -----------------


def claim_who(values: dict[str, Any]) -> dict[str, Any]:
    return {"who": values["user"]["id"]}


def claim_summary(values: dict[str, Any]) -> str:
    return f"{values['session']['state']}:{values['facts'].get('who', '?')}"


def claim_turn(values: dict[str, Any]) -> str | None:
    intent = values["intent"]["name"]
    return intent if intent in ("pay", "help") else None


def claim_args(values: dict[str, Any]) -> dict[str, Any]:
    return {"action": "pay", "user_id": values["user"]["id"]}


def claim_refused(values: dict[str, Any]) -> bool:
    return bool(values["results"]["finance_tool"].get("status") != "ok")


def claim_settled(values: dict[str, Any]) -> str:
    return "settled"


def claim_record(values: dict[str, Any]) -> dict[str, Any]:
    key = f"claim:{values['session']['id']}"
    return {"key": key, "value": {"by": values["facts"]["who"]}, "importance": 0.5}


def claim_pay(values: dict[str, Any]) -> str:
    return "pay"  # names a move that stays and calls: refused to a hook


def claim_big_record(values: dict[str, Any]) -> dict[str, Any]:
    return {"key": "claim:x", "value": {}, "importance": "high"}


def claim_long(values: dict[str, Any]) -> dict[str, Any]:
    return {"who": "x" * 500}
