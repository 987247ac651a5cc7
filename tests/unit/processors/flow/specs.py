"""Flow specs the tests read: a small valid one, and a way to change one line of it."""

from __future__ import annotations

CONTRACT = """\
flow: contract_lookup
version: 1
title: 合同查询
start: ask
intents:
  - name: lookup
    phrases: ["查合同", "find a contract"]
    entities:
      - name: contract_no
        pattern: "(C-[0-9]{4})"
  - name: cancel
    phrases: ["取消", "cancel"]
states:
  - id: ask
    name: 询问合同号
    exit: ended
    on_enter:
      - reply:
          text: "请告诉我合同号"
    waits:
      - id: ask_wait
        after: 5m
        trigger: no_answer
        text: "还在吗？"
  - id: look
    name: 查询
    timeout_ms: 8000
    exit: ended
    summary: "查询合同 {entities.contract_no}"
    on_enter:
      - call:
          tool: contract_tool
          args: {number: "{entities.contract_no}", user: "{user.id}"}
      - reply:
          text: "合同 {results.contract_tool.number}：{results.contract_tool.status}"
  - id: ended
    name: 结束
    kind: terminal
transitions:
  - {from: ask, on: lookup, to: look}
  - {from: ask, on: no_answer, to: ended}
  - {from: ask, on: cancel, to: ended}
  - {from: look, on: done, to: ended}
"""


def line_of(spec: str, text: str) -> int:
    """The 1-based line of ``spec`` that holds ``text`` (the first)."""
    return next(n for n, line in enumerate(spec.splitlines(), 1) if text in line)


def changed(spec: str, old: str, new: str) -> str:
    """``spec`` with its one ``old`` replaced by ``new``."""
    assert spec.count(old) == 1, old
    return spec.replace(old, new)
