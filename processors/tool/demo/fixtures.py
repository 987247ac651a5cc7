"""DEMO FIXTURES: the made-up company of the expense-report walkthrough (``README.md``).

Every constant here is demo data, deterministic and fictitious; nothing is read from a
real HR, finance or OCR system. The figures are the ones every processor agrees on
and the walkthrough shows: 张三 of 采购部, budget 125,000 CNY, 3 invoices totalling 8,240.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "DEMO_APPROVAL_CHAIN",
    "DEMO_BUDGETS",
    "DEMO_BUDGET_REMAINING",
    "DEMO_CURRENCY",
    "DEMO_DEPT",
    "DEMO_FILES",
    "DEMO_INVOICES",
    "DEMO_ITINERARY",
    "DEMO_LODGING_LIMIT",
    "DEMO_LODGING_WARN_RATIO",
    "DEMO_MANAGER",
    "DEMO_TABLES",
    "DEMO_TRIPS",
    "DEMO_TRIP_ID",
    "DEMO_USERS",
    "DEMO_USER_ID",
    "DEMO_USER_NAME",
]

DEMO_USER_ID: Final = "u_xyz789"
DEMO_USER_NAME: Final = "张三"
DEMO_DEPT: Final = "采购部"
DEMO_MANAGER: Final = "张主管"
DEMO_APPROVAL_CHAIN: Final = ("主管", "总监")
DEMO_BUDGET_REMAINING: Final = 125_000
DEMO_CURRENCY: Final = "CNY"

DEMO_USERS: Final[dict[str, dict[str, Any]]] = {
    DEMO_USER_ID: {
        "name": DEMO_USER_NAME,
        "dept": DEMO_DEPT,
        "manager": DEMO_MANAGER,
        "approval_chain": list(DEMO_APPROVAL_CHAIN),
    },
}
"""The demo directory: user id -> name, department, manager, approval chain."""

DEMO_BUDGETS: Final[dict[str, int]] = {DEMO_DEPT: DEMO_BUDGET_REMAINING}

DEMO_INVOICES: Final[tuple[dict[str, Any], ...]] = (
    {"id": "inv-001", "category": "交通", "amount": 2840, "date": "2024-05-12", "confidence": 0.97},
    {"id": "inv-002", "category": "住宿", "amount": 3200, "date": "2024-05-15", "confidence": 0.95},
    {"id": "inv-003", "category": "餐饮", "amount": 2200, "date": "2024-05-14", "confidence": 0.70},
)
"""The three invoices OCR finds in the two demo photos (total 8,240 CNY)."""

DEMO_ITINERARY: Final[dict[str, str]] = {"city": "深圳", "from": "2024-05-12", "to": "2024-05-15"}

DEMO_FILES: Final[dict[str, dict[str, Any]]] = {
    "demo://expense/photo-1.jpg": {"invoices": ("inv-001", "inv-002"), "itinerary": False},
    "demo://expense/photo-2.jpg": {"invoices": ("inv-003",), "itinerary": True},
}
"""What each demo upload shows: photo 1 two invoices, photo 2 one invoice and the itinerary."""

DEMO_TRIP_ID: Final = "trip_shenzhen_2024_05"
DEMO_TRIPS: Final[dict[str, dict[str, str]]] = {
    DEMO_TRIP_ID: {"user_id": DEMO_USER_ID, **DEMO_ITINERARY},
}

DEMO_LODGING_LIMIT: Final = 3500
"""The demo travel policy's lodging cap (CNY)."""
DEMO_LODGING_WARN_RATIO: Final = 0.9
"""A lodging invoice at or above this share of the cap gets a warning."""


DEMO_TABLES: Final[dict[str, dict[str, Any]]] = {
    "A": {
        "title": "订单表",
        "columns": ["订单号", "客户", "金额", "B"],
        "rows": [
            ["O-001", "华南贸易", 1200, "是"],
            ["O-002", "北辰科技", 860, ""],
            ["O-003", "华南贸易", 430, "否"],
            ["O-004", "东方物流", 2210, ""],
            ["O-005", "北辰科技", 990, "是"],
        ],
    },
    "B": {
        "title": "库存表",
        "columns": ["编号", "产品", "库存"],
        "rows": [["P-01", "扫描枪", 12], ["P-02", "标签纸", 340], ["P-03", "打印机", 5]],
    },
}
"""The demo database of the table-export flow: table A (orders, whose field ``B`` is empty
in two rows) and table B (stock)."""
