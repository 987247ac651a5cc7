"""``hermesbus acls``: the ACLs of a bus follow the writers table, and print as commands.

The table itself is applied and enforced for real in tests/integration/fleet/test_cluster.py
(a secured three-node cluster, the demo under exactly these ACLs).
"""

from __future__ import annotations

import json
from pathlib import Path

from hermesbus.compose.acls import bus_acls
from hermesbus.connectors.kafka.acls import Acl
from hermesbus.processors import protocol
from tests.cli_process import clean_env, hermesbus


def _rules(acls: list[Acl], principal: str) -> set[tuple[str, str, str, bool]]:
    return {(a.operation, a.resource, a.name, a.prefixed) for a in acls if a.principal == principal}


def test_an_app_writes_only_the_ingress_topic_and_reads_the_replies() -> None:
    assert _rules(bus_acls("p."), "User:app") == {
        ("Write", "topic", "p.hermes.conversation.in", False),
        ("Read", "topic", "p.hermes.conversation.out", False),
    }


def test_each_processor_writes_exactly_where_the_writers_table_lets_it() -> None:
    """And its own input (a retry is re-sent there), the dead letters, and for the
    conversation the flow registry."""
    acls = bus_acls("p.")
    own = {
        protocol.CONVERSATION: "hermes.conversation.in",
        protocol.DISPATCHER: "hermes.dispatcher",
        protocol.TOOL: "hermes.tool",
        protocol.MEMORY: "hermes.memory",
    }
    for identity, topic in own.items():
        written = {n for op, kind, n, _ in _rules(acls, f"User:{identity}") if op == "Write"}
        table = {f"p.{t}" for t, writers in protocol.WRITERS.items() if identity in writers}
        extra = {f"p.{topic}", "p.hermes.dlq"}
        extra |= {"p.hermes.flows"} if identity == protocol.CONVERSATION else set()
        assert written == table | extra, identity
    assert ("Write", "topic", "p.hermes.conversation.out", False) not in _rules(acls, "User:tool")


def test_each_processor_reads_its_topic_in_its_own_group() -> None:
    acls = bus_acls("p.")
    assert ("Read", "group", "p.dispatcher", False) in _rules(acls, "User:dispatcher")
    assert ("Read", "topic", "p.hermes.dispatcher", False) in _rules(acls, "User:dispatcher")
    tool = _rules(acls, "User:tool")
    assert {("Read", "group", "p.tool", False), ("Read", "group", "p.tool-", True)} <= tool
    assert not any(kind == "group" and n == "p.tool" and wide for _, kind, n, wide in tool)
    assert not any(a.resource == "transactional-id" for a in acls)
    eos = _rules(bus_acls("p.", exactly_once=True), "User:memory")
    assert ("Write", "transactional-id", "p.memory", True) in eos


def test_every_run_reads_the_flow_registry_and_the_rollup_reads_what_its_rules_need() -> None:
    acls = bus_acls("p.")
    for component in ("conversation", "dispatcher", "tool", "memory", "indexer", "diagnostics"):
        assert ("Read", "topic", "p.hermes.flows", False) in _rules(acls, f"User:{component}")
    rollup = _rules(acls, "User:diagnostics")
    assert ("Read", "topic", "p.hermes.diagnostics", False) in rollup  # its judge
    assert ("Describe", "group", "p.dispatcher", False) in rollup  # the lag rule
    assert ("Describe", "group", "p.tool-", True) in rollup


def test_a_principal_with_spaces_is_quoted_for_the_shell(tmp_path: Path) -> None:
    given = "tool=User:CN=tools, O=Acme"
    ran = hermesbus("acls", "--principal", given, env=clean_env(tmp_path), cwd=tmp_path)
    assert ran.code == 0, ran.output
    assert "--allow-principal 'User:CN=tools, O=Acme' --operation" in ran.out


def test_the_command_prints_kafka_acls_lines_and_json(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    printed = hermesbus("acls", "--prefix", "p.", "--bootstrap", "b:9093", env=env, cwd=tmp_path)
    assert printed.code == 0, printed.output
    assert "# app (User:app): 2 ACLs\n" in printed.out
    assert (
        "kafka-acls.sh --bootstrap-server b:9093 --command-config admin.properties --add "
        "--allow-principal User:app --operation Write --topic p.hermes.conversation.in\n"
    ) in printed.out
    as_json = hermesbus(
        "acls", "--prefix", "p.", "--json", "--principal", "tool=User:svc-tools", env=env,
        cwd=tmp_path,
    )  # fmt: skip
    rows = [json.loads(line) for line in as_json.out.splitlines()]
    assert len(rows) == len(bus_acls("p."))
    assert {r["principal"] for r in rows if r["name"] == "p.hermes.tool"} >= {"User:svc-tools"}


def test_a_bad_principal_is_a_usage_error(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    for given, said in (
        ("planner=User:x", "no component planner (components: conversation,"),
        ("tool", "--principal tool: use COMPONENT=TYPE:NAME"),
        ("tool=svc", "tool=svc: a principal is TYPE:NAME"),
    ):
        ran = hermesbus("acls", "--principal", given, env=env, cwd=tmp_path)
        assert ran.code == 2, ran.output
        assert said in ran.err and "Traceback" not in ran.output
