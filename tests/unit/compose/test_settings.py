"""The program's one settings object: read once from the environment, or built in code
from nothing; a sandbox's made from the bus's without touching the environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermesbus.compose.settings import SANDBOX, Settings
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import ConfigError, SettingError
from hermesbus.processors.tool import ToolEnvironment

POISON = {
    "HERMES_HOME": "/nonexistent/poison-home",
    "HERMES_KAFKA_BOOTSTRAP": "poison:1",
    "HERMES_RUNTIME_MAX_IN_FLIGHT": "3",
    "HERMES_REDIS_URL": "redis://poison:1/0",
    "HERMES_NEO4J_URL": "bolt://poison:1",
    "HERMES_ELASTICSEARCH_URL": "http://poison:1",
    "HERMES_MEMORY_PATH": "/nonexistent/poison-memory.sqlite3",
    "HERMES_TOOL_MODULES": "poison",
    "HERMES_LLM_URL": "http://poison:1",
    "HERMES_TOPIC_PREFIX": "poison.",
    "HERMES_KEYS_FILE": "/nonexistent/poison-keys.json",
    "HERMES_KEY_CONVERSATION": "s3cret-key",
}


def test_every_part_is_read_from_its_variables_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POISON.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    read = Settings.from_environment()
    home = tmp_path / "home"
    assert read.home == home and read.sqlite.home == home and read.tool.home == home
    assert read.kafka.bootstrap == "poison:1" and read.runtime.max_in_flight == 3
    assert read.redis.url is not None and read.neo4j.url == "bolt://poison:1"
    assert read.memory.db_path == Path("/nonexistent/poison-memory.sqlite3")
    assert read.bus.topic_prefix == "poison." and read.conversation.llm_url == "http://poison:1"
    assert read.keys.file == Path("/nonexistent/poison-keys.json")
    assert dict(read.keys.given)["HERMES_KEY_CONVERSATION"].get_secret_value() == "s3cret-key"
    assert "s3cret" not in repr(read.keys)  # the keys' values are secrets
    assert read.tool_env.revealed()["HERMES_LLM_URL"] == "http://poison:1"  # for the tools
    assert "s3cret" not in repr(read.tool_env) and "s3cret" not in str(read.tool_env)
    monkeypatch.setenv("HERMES_KAFKA_BOOTSTRAP", "changed:2")
    assert read.kafka.bootstrap == "poison:1"  # read once: later changes are not seen
    assert read.tool_env.revealed()["HERMES_KAFKA_BOOTSTRAP"] == "poison:1"


def test_settings_built_in_code_read_nothing_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POISON.items():
        monkeypatch.setenv(name, value)
    kafka = KafkaConfig.model_construct(bootstrap="127.0.0.1:9092")
    built = Settings.of(tmp_path, kafka=kafka)
    assert built.home == tmp_path and built.kafka.bootstrap == "127.0.0.1:9092"
    assert built.runtime.max_in_flight == 64  # the default, not the variable
    assert built.redis.url is None and not built.neo4j.url and not built.elasticsearch.url
    assert built.memory.db_path == tmp_path / "memory.sqlite3"
    assert built.sqlite.path == tmp_path / "state.sqlite3"
    assert built.tool.tools_path.parent == tmp_path
    assert built.bus.topic_prefix == "" and built.conversation.llm_url is None
    assert built.keys.file == tmp_path / "keys.json" and dict(built.keys.given) == {}
    assert built.tool_env.revealed() == {}  # the tools are given no variable
    given = ToolEnvironment.of({"HERMES_TOOL_KEY": "k"})
    assert Settings.of(tmp_path, tool_env=given).tool_env.revealed() == {"HERMES_TOOL_KEY": "k"}
    assert os.environ["HERMES_HOME"] == POISON["HERMES_HOME"]  # nothing was changed either
    with pytest.raises(ConfigError, match="no part named kafak"):
        Settings.of(tmp_path, kafak=kafka)


def test_a_sandbox_keeps_every_store_in_its_folder_and_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POISON.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "prod"))
    production = Settings.from_environment()
    assert production.outside(tmp_path / "prod") == [
        f"memory at {POISON['HERMES_MEMORY_PATH']}",
        "Redis (a server)",
        "Neo4j (a server)",
        "Elasticsearch (a server)",
    ]
    sandbox = production.sandbox(tmp_path / "sandbox")
    assert sandbox.outside(tmp_path / "sandbox") == []
    assert sandbox.home == tmp_path / "sandbox"
    assert sandbox.memory.db_path == tmp_path / "sandbox" / "memory.sqlite3"
    assert sandbox.kafka == production.kafka and sandbox.keys == production.keys
    assert sandbox.tool_env == production.tool_env  # live tools get what the bus's get
    assert sandbox.bus.topic_prefix == production.bus.topic_prefix
    assert production.redis.url is not None  # the bus's own settings are as they were


def test_another_home_moves_every_part_and_the_default_keyring(tmp_path: Path) -> None:
    settings = Settings.of(tmp_path / "a")
    moved = settings.at_home(tmp_path / "b")
    assert moved.home == moved.sqlite.home == moved.tool.home == moved.memory.home
    assert moved.home == tmp_path / "b" and moved.keys.file == tmp_path / "b" / "keys.json"
    named = settings.with_parts(keys=settings.keys.model_copy(update={"file": tmp_path / "k"}))
    assert named.at_home(tmp_path / "b").keys.file == tmp_path / "k"  # a named one stays


def test_every_part_is_placed_for_a_sandbox_and_what_is_not_taken_is_a_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a part added later (a new backend) must say what a sandbox does with it
    assert set(SANDBOX) == set(Settings.model_fields) - {"keys"}
    for name, value in POISON.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "prod"))
    production = Settings.from_environment()
    sandbox = production.sandbox(tmp_path / "sandbox")
    fresh = Settings.of(tmp_path / "sandbox")
    for name, how in SANDBOX.items():
        if how == "default":
            assert getattr(sandbox, name) == getattr(fresh, name), name
        if how == "taken":
            assert getattr(sandbox, name) == getattr(production, name), name
        if how == "moved":
            assert getattr(sandbox, name).home == tmp_path / "sandbox", name


def test_defaults_built_in_code_are_given_by_nobody(tmp_path: Path) -> None:
    # the embedded broker's group timings apply where the runtime's were not set
    built = Settings.of(tmp_path)
    assert built.runtime.model_fields_set == set()
    embedded = built.runtime.for_embedded_broker()
    assert embedded.session_timeout_ms < built.runtime.session_timeout_ms


def test_a_home_given_in_code_is_taken_as_hermes_home_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings.of(Path("rel")).home == tmp_path / "rel"
    assert Settings.of(tmp_path).at_home(Path("other")).home == tmp_path / "other"
    (tmp_path / "afile").write_text("")
    with pytest.raises(SettingError, match="is a file, not a folder"):
        Settings.of(tmp_path / "afile")
    with pytest.raises(SettingError, match="is a file, not a folder"):
        Settings.of(tmp_path).at_home(tmp_path / "afile")


def test_settings_print_no_url_and_can_be_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.setenv("HERMES_ELASTICSEARCH_URL", "http://user:espw@es:9200")
    monkeypatch.setenv("HERMES_NEO4J_URL", "bolt://neo:neopw@h:7687")
    monkeypatch.setenv("HERMES_TEST_TOOL_KEY", "toolpw")  # only in what the tools are given
    read = Settings.from_environment()
    assert "espw" not in repr(read) and "neopw" not in str(read)
    assert "toolpw" not in repr(read.tool_env) and "toolpw" not in read.model_dump_json()
    assert hash(read) == hash(Settings.from_environment())
    with pytest.raises(TypeError, match="kafka must be a KafkaConfig"):
        read.with_parts(kafka=read.runtime)
    with pytest.raises(TypeError, match="tool_env must be a ToolEnvironment"):
        read.with_parts(tool_env=read.keys)
