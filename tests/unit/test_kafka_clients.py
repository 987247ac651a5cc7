"""Every aiokafka client is built in one place, and one group-less log reader (issue 26
point 2). The source is read with :mod:`ast`, as ``test_layers`` reads imports.

``hermesbus.connectors.kafka.clients`` builds every consumer, producer, admin client and
bare client of the product from the :class:`KafkaConfig` (bootstrap, security, SASL,
TLS): no other product module constructs ``AIOKafkaConsumer``, ``AIOKafkaProducer``,
``AIOKafkaAdminClient`` or ``AIOKafkaClient``, by name or as an attribute. Tests and
``bench/`` may.

``trace --from-log``, ``tail``, replay, export and a redrive's sandbox check read the log
through ``hermesbus.connectors.kafka.LogReader``, which knows the brokers' quirks (tansu's
short ends, its offsets for times) and says what failed the same way for all. A module
that builds ``AIOKafkaConsumer(...)`` with ``group_id=None`` (or with no ``group_id``:
that is aiokafka's default) outside the Kafka connector carries a reader of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.unit.test_layers import MODULES

TRANSPORT = "hermesbus.connectors.kafka"
BUILDER = f"{TRANSPORT}.clients"
CLASSES = frozenset(
    {"AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient", "AIOKafkaClient"}
)
"""aiokafka's client classes: only ``BUILDER`` constructs them."""


def _consumer_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names ``AIOKafkaConsumer`` is bound to, and the names of aiokafka modules."""
    names, modules = {"AIOKafkaConsumer"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiokafka"):
            names |= {a.asname or a.name for a in node.names if a.name == "AIOKafkaConsumer"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.startswith("aiokafka")}
    return names, modules


def _groupless(call: ast.Call) -> bool:
    """Built with ``group_id=None``, or with no ``group_id`` and no ``**kwargs`` that could
    give one (aiokafka's default is None)."""
    for keyword in call.keywords:
        if keyword.arg == "group_id":
            return isinstance(keyword.value, ast.Constant) and keyword.value.value is None
    return all(keyword.arg is not None for keyword in call.keywords)


def groupless_consumers(source: str) -> Iterator[int]:
    """The lines where ``source`` builds a consumer without a group."""
    tree = ast.parse(source)
    names, modules = _consumer_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        named = isinstance(func, ast.Name) and func.id in names
        dotted = (
            isinstance(func, ast.Attribute)
            and func.attr == "AIOKafkaConsumer"
            and isinstance(func.value, ast.Name | ast.Attribute)
            and ast.unparse(func.value).split(".")[0] in modules
        )
        if (named or dotted) and _groupless(node):
            yield node.lineno


FOUND = {
    module: lines
    for module, path in MODULES.items()
    if (lines := list(groupless_consumers(path.read_text())))
}


def test_the_analysis_sees_the_reader() -> None:
    # the rule below is only as good as what it reads: the one group-less consumer is found
    assert BUILDER in FOUND
    assert all(module in MODULES for module in (f"{TRANSPORT}.reader", "hermesbus.trace.tail"))


def test_the_analysis_tells_a_group_from_none() -> None:
    def lines(call: str, imported: str = "from aiokafka import AIOKafkaConsumer") -> list[int]:
        return list(groupless_consumers(f"{imported}\n{call}\n"))

    assert lines("AIOKafkaConsumer(group_id=None)") == [2]
    assert lines("AIOKafkaConsumer(bootstrap_servers='x')") == [2]  # aiokafka's default: none
    assert lines("C(group_id=None)", "from aiokafka import AIOKafkaConsumer as C") == [2]
    assert lines("aiokafka.AIOKafkaConsumer(group_id=None)", "import aiokafka") == [2]
    assert lines("AIOKafkaConsumer(group_id='g')") == []
    assert lines("AIOKafkaConsumer(group_id=name)") == []
    assert lines("AIOKafkaConsumer(**kwargs)") == []  # cannot tell: its group may be there


def test_only_the_kafka_connector_builds_a_group_less_consumer() -> None:
    outside = {module: lines for module, lines in FOUND.items() if not module.startswith(TRANSPORT)}
    assert not outside, (
        "a group-less consumer built outside connectors/kafka (read the log with "
        f"hermesbus.connectors.kafka.LogReader instead): {outside}"
    )


# -- every client built in one place --------------------------------------------------------


def _class_names(tree: ast.Module) -> set[str]:
    """The names aiokafka's client classes are bound to (their own, and any alias)."""
    names = set(CLASSES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiokafka"):
            names |= {a.asname or a.name for a in node.names if a.name in CLASSES}
    return names


def constructions(source: str) -> Iterator[tuple[int, str]]:
    """Where ``source`` constructs an aiokafka client: the line, and the call as written.

    A call of a name bound to one of the classes, or of an attribute with a class's name
    whatever it is reached through (``aiokafka.AIOKafkaClient(...)``,
    ``aiokafka.admin.AIOKafkaAdminClient(...)``). A class named only in an annotation or
    reached for one of its attributes is not a construction."""
    tree = ast.parse(source)
    names = _class_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        named = isinstance(func, ast.Name) and func.id in names
        dotted = isinstance(func, ast.Attribute) and func.attr in CLASSES
        if named or dotted:
            yield node.lineno, ast.unparse(func)


BUILT = {
    module: found
    for module, path in MODULES.items()
    if (found := list(constructions(path.read_text())))
}


def test_the_analysis_sees_every_construction() -> None:
    def built(code: str, imported: str = "") -> list[tuple[int, str]]:
        return list(constructions(f"{imported}\n{code}\n"))

    plain = "from aiokafka import AIOKafkaConsumer, AIOKafkaProducer"
    assert built("AIOKafkaProducer(**kwargs, acks='all')", plain) == [(2, "AIOKafkaProducer")]
    assert built("AIOKafkaConsumer(group_id='g')", plain) == [(2, "AIOKafkaConsumer")]
    assert built("P(acks='all')", "from aiokafka import AIOKafkaProducer as P") == [(2, "P")]
    assert built("A(**kwargs)", "from aiokafka.admin import AIOKafkaAdminClient as A") == [(2, "A")]
    assert built("aiokafka.AIOKafkaClient(**kwargs)", "import aiokafka") == [
        (2, "aiokafka.AIOKafkaClient")
    ]
    assert built("kafka.admin.AIOKafkaAdminClient()", "import aiokafka as kafka") == [
        (2, "kafka.admin.AIOKafkaAdminClient")
    ]
    assert built("AIOKafkaClient(**kwargs)") == [(2, "AIOKafkaClient")]  # however it came
    assert built("consumer: AIOKafkaConsumer | None = None", plain) == []  # an annotation
    assert built("hook = aiokafka.client.AIOKafkaClient._metadata_update", "import aiokafka") == []
    assert built("group_consumer(config, 'g')", plain) == []


def test_the_analysis_sees_the_builder() -> None:
    # the rule below is only as good as what it reads: the builder builds all four
    assert {call for _line, call in BUILT.get(BUILDER, [])} == CLASSES


def test_only_the_clients_module_builds_aiokafka_clients() -> None:
    outside = {module: found for module, found in BUILT.items() if module != BUILDER}
    assert not outside, (
        "an aiokafka client constructed outside connectors/kafka/clients.py (build it with "
        f"hermesbus.connectors.kafka's group_consumer, plain_producer, ...): {outside}"
    )
