"""The six demo tools over the DEMO FIXTURES, with their probes and verifiers.

Each tool takes the arguments dict and returns a result signed with Ed25519 by the key
in ``HERMES_DEMO_SIGNING_KEY`` (see :func:`~hermesbus.processors.tool.demo.demo_keys`).
They run in the tool processor's worker processes; stdlib only, plus cryptography when
signing.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

from hermesbus.processors.tool._spec import SignedResult
from hermesbus.processors.tool.demo.fixtures import (
    DEMO_BUDGETS,
    DEMO_CURRENCY,
    DEMO_FILES,
    DEMO_INVOICES,
    DEMO_ITINERARY,
    DEMO_LODGING_LIMIT,
    DEMO_LODGING_WARN_RATIO,
    DEMO_TABLES,
    DEMO_TRIPS,
    DEMO_USERS,
)

__all__ = [
    "DEMO_SIGNING_ENV",
    "DEMO_VERIFY_ENV",
    "DemoToolError",
    "finance_probe",
    "finance_tool",
    "finance_verify",
    "ocr_probe",
    "ocr_tool",
    "ocr_verify",
    "org_probe",
    "org_tool",
    "org_verify",
    "quick_probe",
    "rule_engine_probe",
    "rule_engine_tool",
    "rule_engine_verify",
    "table_probe",
    "table_result",
    "table_tool",
    "table_verify",
    "trip_probe",
    "trip_tool",
    "trip_verify",
]

DEMO_SIGNING_ENV = "HERMES_DEMO_SIGNING_KEY"
"""Base64 of the demo tools' raw Ed25519 private key (the workers sign with it)."""
DEMO_VERIFY_ENV = "HERMES_DEMO_VERIFY_KEY"
"""Base64 of the matching raw public key (the processor verifies with it)."""
OCR_SECONDS = 1.0
"""The demo OCR is honestly slow: each call takes this long."""


class DemoToolError(Exception):
    """A request the demo data cannot answer (unknown user, file, trip): status 422."""

    status_code = 422


def _signed(result: dict[str, Any]) -> SignedResult:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (  # noqa: PLC0415 - only when signing
        Ed25519PrivateKey,
    )

    secret = os.environ.get(DEMO_SIGNING_ENV)
    if not secret:
        raise RuntimeError(f"the demo signing key {DEMO_SIGNING_ENV} is not set")
    key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(secret))
    body = json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode()
    return SignedResult(body, base64.b64encode(key.sign(body)).decode("ascii"))


def _user(user_id: str) -> dict[str, Any]:
    user = DEMO_USERS.get(user_id)
    if user is None:
        raise DemoToolError(f"user {user_id!r} is not in the demo directory")
    return user


# -- org_tool ------------------------------------------------------------------------


def org_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo directory: the user's department, manager and approval chain."""
    user_id = arguments["user_id"]
    user = _user(user_id)
    chain = user["approval_chain"]
    return _signed(
        {
            "user_id": user_id,
            "name": user["name"],
            "dept": user["dept"],
            "manager": user["manager"],
            "approval_chain": chain,
            "symbols": {"user_dept": user["dept"]},
            "facts": [
                {
                    "subject": f"user:{user_id}",
                    "relation": "belongs_to",
                    "object": f"dept:{user['dept']}",
                }
            ],
            "verification_steps": [
                f"已比对组织架构目录：{user['name']}属于{user['dept']}",
                f"已确认审批链：{' → '.join(chain)}，直属主管：{user['manager']}",
            ],
        }
    )


def org_verify(result: dict[str, Any]) -> bool:
    facts = result.get("facts", [])
    return bool(result["dept"] and result["manager"]) and all(
        f["subject"] == f"user:{result['user_id']}" for f in facts
    )


# -- finance_tool ----------------------------------------------------------------------


def finance_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo ledger: ``budget`` (the department's remaining budget) or ``submit``."""
    user = _user(arguments["user_id"])
    if arguments["action"] == "budget":
        remaining = DEMO_BUDGETS[user["dept"]]
        return _signed(
            {
                "dept": user["dept"],
                "budget_remaining": remaining,
                "currency": DEMO_CURRENCY,
                "verification_steps": [
                    f"已查询财务系统：{user['dept']}预算余额 {remaining:,} {DEMO_CURRENCY}"
                ],
            }
        )
    return _signed(_submit(arguments, user))


def _submit(arguments: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    amount, approver = arguments["amount"], arguments["approver"]
    if approver != user["manager"]:
        raise DemoToolError(f"approver {approver!r} is not {user['name']}'s manager")
    if amount > DEMO_BUDGETS[user["dept"]]:
        raise DemoToolError(f"amount {amount} exceeds the remaining budget of {user['dept']}")
    report_id = arguments["report_id"]
    return {
        "status": "submitted",
        "report_id": report_id,
        "approver": approver,
        "facts": [
            {
                "subject": f"expense:{report_id}",
                "relation": "approved_by",
                "object": f"person:{approver}",
            }
        ],
        "verification_steps": [
            f"已提交报销单 {report_id}：金额 {amount:,} {DEMO_CURRENCY}，"
            f"{len(arguments.get('invoices', []))}张发票",
            f"已核对审批人：{approver}为{user['name']}的直属主管",
        ],
    }


def finance_verify(result: dict[str, Any]) -> bool:
    if "budget_remaining" in result:
        return bool(result["budget_remaining"] >= 0 and result["currency"] == DEMO_CURRENCY)
    return bool(result["status"] == "submitted" and result["report_id"].startswith("EXP-"))


# -- ocr_tool ----------------------------------------------------------------------------


def ocr_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo OCR: reads invoices and the itinerary off the two demo photos (slowly)."""
    time.sleep(OCR_SECONDS)
    ids: list[str] = []
    itinerary = False
    for file in arguments["files"]:
        page = DEMO_FILES.get(file["uri"])
        if page is None:
            raise DemoToolError(f"file {file['uri']!r} is not one of the demo uploads")
        ids += [i for i in page["invoices"] if i not in ids]
        itinerary = itinerary or page["itinerary"]
    invoices = [dict(inv) for inv in DEMO_INVOICES if inv["id"] in ids]
    return _signed(_ocr_result(invoices, itinerary, len(arguments["files"])))


def _ocr_result(invoices: list[dict[str, Any]], itinerary: bool, files: int) -> dict[str, Any]:
    low = [inv for inv in invoices if inv["confidence"] < 0.8]  # noqa: PLR2004 - review threshold
    result: dict[str, Any] = {
        "invoices": invoices,
        "total": sum(inv["amount"] for inv in invoices),
        "currency": DEMO_CURRENCY,
        "confidence_min": min((inv["confidence"] for inv in invoices), default=1.0),
    }
    if itinerary:
        result["itinerary"] = dict(DEMO_ITINERARY)
    result["symbols"] = {"invoices": ",".join(inv["id"] for inv in invoices)}
    result["verification_steps"] = [
        f"已识别{files}个文件：{len(invoices)}张发票，合计 {result['total']:,} {DEMO_CURRENCY}",
        *(f"{inv['id']} 置信度 {inv['confidence']:.2f} 低于 0.8，建议人工复核" for inv in low),
    ]
    return result


def ocr_verify(result: dict[str, Any]) -> bool:
    invoices = result["invoices"]
    confidences = [inv["confidence"] for inv in invoices]
    return bool(
        result["total"] == sum(inv["amount"] for inv in invoices)
        and result["confidence_min"] == min(confidences, default=1.0)
    )


# -- trip_tool ---------------------------------------------------------------------------


def trip_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo travel system: is there a trip of the user matching city and dates?"""
    user_id, city = arguments["user_id"], arguments["city"]
    start, end = arguments["from"], arguments["to"]
    for trip_id, trip in DEMO_TRIPS.items():
        if (trip["user_id"], trip["city"], trip["from"], trip["to"]) == (user_id, city, start, end):
            return _signed(_trip_result(trip_id, trip, arguments["invoices"]))
    raise DemoToolError(f"no demo trip of {user_id} to {city} from {start} to {end}")


def _trip_result(trip_id: str, trip: dict[str, str], invoice_ids: list[str]) -> dict[str, Any]:
    dated = {inv["id"]: inv["date"] for inv in DEMO_INVOICES}
    inside = [i for i in invoice_ids if trip["from"] <= dated.get(i, "") <= trip["to"]]
    facts = [
        {"subject": f"invoice:{i}", "relation": "occurred_during", "object": f"trip:{trip_id}"}
        for i in inside
    ]
    facts.append(
        {"subject": f"trip:{trip_id}", "relation": "taken_by", "object": f"user:{trip['user_id']}"}
    )
    verified = len(inside) == len(invoice_ids)
    return {
        "verified": verified,
        "trip_id": trip_id,
        "city": trip["city"],
        "from": trip["from"],
        "to": trip["to"],
        "facts": facts,
        "verification_steps": [
            f"已核对差旅系统：行程 {trip_id}，{trip['city']}，{trip['from']} 至 {trip['to']}",
            f"{len(inside)}/{len(invoice_ids)}张发票日期在行程期间",
        ],
    }


def trip_verify(result: dict[str, Any]) -> bool:
    return bool(not result["verified"] or (result["trip_id"] and result["facts"]))


# -- rule_engine_tool ----------------------------------------------------------------------


def rule_engine_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo travel policy: lodging cap, and the approver from the department's chain."""
    dept = arguments["dept"]
    managers = [u["manager"] for u in DEMO_USERS.values() if u["dept"] == dept]
    if not managers:
        raise DemoToolError(f"department {dept!r} is not in the demo directory")
    known = {inv["id"]: inv for inv in DEMO_INVOICES}
    invoices = [known.get(i, {}) if isinstance(i, str) else i for i in arguments["invoices"]]
    warnings, valid = [], True
    for invoice in invoices:
        amount = invoice.get("amount", 0)
        if invoice.get("category") != "住宿":
            continue
        if amount > DEMO_LODGING_LIMIT:
            valid = False
            warnings.append(f"住宿费{amount}超过标准上限{DEMO_LODGING_LIMIT}")
        elif amount >= DEMO_LODGING_LIMIT * DEMO_LODGING_WARN_RATIO:
            warnings.append(f"住宿费{amount}接近标准上限{DEMO_LODGING_LIMIT}")
    steps = [
        f"已比对差旅报销规则库：住宿标准上限{DEMO_LODGING_LIMIT}，共{len(invoices)}张发票",
        f"审批人按{dept}审批链确定：{managers[0]}",
    ]
    return _signed(
        {"valid": valid, "warnings": warnings, "approver": managers[0], "verification_steps": steps}
    )


def rule_engine_verify(result: dict[str, Any]) -> bool:
    return bool(result["approver"]) and isinstance(result["valid"], bool)


# -- probes --------------------------------------------------------------------------------


# -- table_tool ------------------------------------------------------------------------------


def _table(name: str) -> tuple[str, dict[str, Any]]:
    """A table of the demo database by its name (``A`` or the symbol's ``table:A``)."""
    short = name.removeprefix("table:").strip().upper()
    table = DEMO_TABLES.get(short)
    if table is None:
        raise DemoToolError(
            f"table {name!r} is not in the demo database ({', '.join(DEMO_TABLES)})"
        )
    return short, table


def _exported(short: str) -> dict[str, str]:
    return {"subject": f"table:{short}", "relation": "exported_as", "object": f"file:{short}.xlsx"}


def table_tool(arguments: dict[str, Any]) -> SignedResult:
    """The demo database's tables as Excel files: ``export`` one (with added columns, a
    field checked for empty values first) or ``merge`` several."""
    return _signed(table_result(arguments))


def table_result(arguments: dict[str, Any]) -> dict[str, Any]:
    """What :func:`table_tool` answers, unsigned."""
    if arguments["action"] == "merge":
        return _merge([_table(name) for name in arguments["tables"]])
    short, table = _table(arguments["table"])
    added = list(dict.fromkeys(c for c in arguments.get("add_columns") or [] if c))
    taken = [c for c in added if c in table["columns"]]
    if taken:
        raise DemoToolError(f"table {short} has a column {taken[0]!r} already")
    columns = [*table["columns"], *added]
    result: dict[str, Any] = {
        "table": short,
        "title": table["title"],
        "file": f"{short}.xlsx",
        "rows": len(table["rows"]),
        "columns": columns,
        "column_count": len(columns),
        "facts": [_exported(short)],
        "verification_steps": [f"已读取演示数据库的{short}表（{table['title']}）"],
    }
    field = arguments.get("check_empty")
    if field:
        folded = [column.casefold() for column in table["columns"]]
        if field.casefold() not in folded:
            raise DemoToolError(f"table {short} has no field {field!r}")
        at = folded.index(field.casefold())
        result["empty_rows"] = sum(1 for row in table["rows"] if row[at] in ("", None))
    return result


def _merge(tables: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    names = [short for short, _ in tables]
    if len(set(names)) != len(names):
        raise DemoToolError(f"the tables to merge name one table twice: {', '.join(names)}")
    return {
        "tables": names,
        "names": "与".join(f"{short}表" for short in names),
        "file": "+".join(names) + ".xlsx",
        "rows": sum(len(table["rows"]) for _, table in tables),
        "facts": [_exported(short) for short in names],
        "verification_steps": [f"已合并演示数据库的{'、'.join(names)}表"],
    }


def table_verify(result: dict[str, Any]) -> bool:
    facts = result.get("facts", [])
    return bool(facts) and all(f["subject"].startswith("table:") for f in facts)


def quick_probe() -> dict[str, Any]:
    """A healthy, fast demo system."""
    return {"latency_ms": 40.0, "success_rate": 1.0, "quota_remaining": None}


org_probe = finance_probe = trip_probe = rule_engine_probe = table_probe = quick_probe


def ocr_probe() -> dict[str, Any]:
    """The demo OCR reports itself slow (1.2 s > 1 s) but healthy: the user is told to wait."""
    return {"latency_ms": 1200.0, "success_rate": 0.98, "quota_remaining": 500}
