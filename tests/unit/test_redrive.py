"""What a redrive copies and how a fork changes a turn, without a broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from hermesbus import Payload, Reply, ToolCall, ToolResult, UserTurn
from hermesbus.compose import backends
from hermesbus.compose import redrive as sandboxes
from hermesbus.compose.redrive import Fork, external_inputs, forked, redrive, sandbox_home
from hermesbus.compose.settings import Settings
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.redis import RedisConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.memory import SqliteGraphStore, SqlitePreferenceStore
from hermesbus.errors import ConfigError
from hermesbus.processors.recorded import ArgumentTools
from hermesbus.replay.shadow import Recording
from hermesbus.runtime import derive_id
from hermesbus.trace.spans import Hop
from tests.builders import T0, turn
from tests.cli_process import clean_env, hermesbus

IN = "hermes.conversation.in"


def test_only_the_apps_user_turns_are_copied_once_each_in_consumed_order() -> None:
    first, second = turn(message_id="t1"), turn(message_id="t2")
    answer = turn(message_id="r1").model_copy(
        update={
            "source": "conversation:S1",
            "target": "user:app",
            "payload": Payload(body=Reply(text="hi")),
        }
    )
    other = turn(message_id="x1", session_id="s9")
    hops = [
        Hop(second, IN, 0, 1, 5),  # timed before t1 by its producer's clock, yet after it
        Hop(first, IN, 0, 0, 9),
        Hop(first, IN, 0, 2, 10),  # redelivered
        Hop(answer, "hermes.conversation.out", 0, 0, 11),
        Hop(other, IN, 1, 0, 12),
    ]
    found = external_inputs(Recording.of(hops, "test"), ["s1"])
    assert [h.envelope.message_id for h in found] == ["t1", "t2"]


def test_a_fork_sets_fields_by_path_and_gets_a_new_id() -> None:
    original = turn(message_id="t1")
    changed = forked(
        original, Fork("t1", {"payload.body.text": "重新上传", "user_id": "u2"}), "try-1."
    )
    assert isinstance(changed.payload.body, UserTurn) and changed.payload.body.text == "重新上传"
    assert changed.user_id == "u2" and changed.message_id == derive_id("t1", "fork", "try-1.")
    assert (changed.trace_id, changed.session_id) == (original.trace_id, original.session_id)


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ({"payload.body.txt": "x"}, "no field 'payload.body.txt'"),
        ({"payload.nope.text": "x"}, "no field 'payload.nope'"),
        ({"timestamp": "yesterday"}, "invalid at timestamp"),
    ],
)
def test_a_bad_set_names_the_field(sets: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        forked(turn(), Fork("m1", sets), "try-1.")


@pytest.mark.parametrize("prefix", ["", ".", "../up.", "a/b.", "x y."])
def test_a_sandbox_prefix_is_a_plain_name(prefix: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a sandbox prefix of letters"):
        sandbox_home(tmp_path, prefix)


def test_the_sandbox_lives_under_the_state_folder(tmp_path: Path) -> None:
    assert sandbox_home(tmp_path, "try-1.") == tmp_path / "replays" / "try-1"


async def test_recorded_tools_answer_the_same_arguments_and_say_when_they_cannot() -> None:
    call = ToolCall(tool="org_tool", arguments_json='{"user_id": "u1"}', idempotency_key="k1")
    dispatched = turn(message_id="c1").model_copy(
        update={
            "source": "mcp:dispatcher",
            "target": "tool:org_tool",
            "payload": Payload(body=call),
        }
    )
    result = ToolResult(
        tool="org_tool", status_code=200, result_json='{"dept": "采购部"}', verified=True
    )
    answer = dispatched.model_copy(
        update={
            "message_id": derive_id("c1", "out", 0),
            "source": "tool:org_tool",
            "target": "mcp:dispatcher",
            "payload": Payload(body=result),
        }
    )
    tools = ArgumentTools.of(
        Recording.of(
            [Hop(dispatched, "hermes.tool", 0, 0, 1), Hop(answer, "hermes.dispatcher", 0, 0, 2)],
            "test",
        )
    )
    same = call.model_copy(
        update={"idempotency_key": "another"}
    )  # a fork's new key, same arguments
    assert (await tools.call(same, now=T0)).result == result
    new = call.model_copy(update={"arguments_json": '{"user_id": "u2"}'})
    missed = (await tools.call(new, now=T0)).result
    assert missed.status_code == 599 and "never called with these arguments" in (missed.error or "")
    assert tools.missed == [new]


def test_a_slice_ends_the_turns_copied_but_keeps_those_before_it() -> None:
    turns = [turn(message_id=f"t{n}", trace_id=f"tr{n}") for n in range(4)]
    recording = Recording.of([Hop(t, IN, 0, n, n) for n, t in enumerate(turns)], "test")
    found = external_inputs(recording, ["s1"], selected=lambda hop: hop.envelope.trace_id == "tr2")
    assert [h.envelope.message_id for h in found] == ["t0", "t1", "t2"]
    assert external_inputs(recording, ["s1"], selected=lambda hop: False) == []


async def test_a_sandbox_used_before_is_refused(tmp_path: Path) -> None:
    used = sandbox_home(tmp_path, "try-1.")
    used.mkdir(parents=True)
    (used / "lineage.json").write_text("{}")
    recording = Recording.of([Hop(turn(), IN, 0, 0, 0)], "test")
    settings = Settings.of(tmp_path, kafka=KafkaConfig(bootstrap="127.0.0.1:9"))
    with pytest.raises(ConfigError, match="sandbox try-1. was used before"):
        await redrive(recording, ["s1"], settings, into="try-1.")


def test_a_sandbox_uses_no_production_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox's sessions have the production ids: its state must stay in its folder
    for name in ("HERMES_ELASTICSEARCH_URL", "HERMES_REDIS_URL", "HERMES_NEO4J_URL"):
        monkeypatch.setenv(name, f"{name.lower()}://prod:1")
    production_memory = tmp_path / "prod" / "memory.sqlite3"
    monkeypatch.setenv("HERMES_MEMORY_PATH", str(production_memory))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "prod"))
    production = Settings.from_environment()
    sandbox = sandboxes._sandboxed(production, tmp_path / "sandbox")
    assert sandbox.home == tmp_path / "sandbox"
    assert isinstance(backends.state_store(sandbox), SqliteStateStore)
    stores = backends.memory_stores(sandbox)
    assert isinstance(stores.graph, SqliteGraphStore)
    assert isinstance(stores.preferences, SqlitePreferenceStore)
    assert stores.settings.db_path == tmp_path / "sandbox" / "memory.sqlite3"
    assert backends.tool_store(sandbox).where == str(tmp_path / "sandbox" / "tools.sqlite3")
    assert not isinstance(backends.trace_index(sandbox), ElasticsearchTraceIndex)
    assert sandbox.keys == production.keys  # the bus's keyring, read
    # the bus's own settings are as they were: nothing was changed to make the sandbox
    assert production.redis.url is not None and production.memory.db_path == production_memory
    assert os.environ["HERMES_HOME"] == str(tmp_path / "prod")


def test_a_sandbox_whose_settings_still_name_a_production_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    production = Settings.of(tmp_path / "prod")
    home = tmp_path / "sandbox"
    moved = production.sandbox(home)
    assert moved.outside(home) == []
    # a part Settings.sandbox does not move (one added later, say) is refused, by name
    unmoved = moved.model_copy(update={"sqlite": production.sqlite})
    monkeypatch.setattr(Settings, "sandbox", lambda self, to, keys=None: unmoved)
    with pytest.raises(ConfigError, match=r"but the settings give session state at .*prod"):
        sandboxes._sandboxed(production, home)
    redis = RedisConfig.model_construct(url=SecretStr("redis://prod:1"))
    served = moved.model_copy(update={"redis": redis})
    monkeypatch.setattr(Settings, "sandbox", lambda self, to, keys=None: served)
    with pytest.raises(ConfigError, match=r"settings give Redis \(a server\): refused"):
        sandboxes._sandboxed(production, home)


def test_a_redrive_dry_run_says_which_prefix_it_would_refuse(tmp_path: Path) -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "demo-b.tar.gz"
    args = ["--bundle", str(golden), "--redrive", "--into", "try-9", "--dry-run"]
    ran = hermesbus("replay", *args, env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert ran.code == 0, ran.output
    assert ran.out.splitlines()[-1] == (
        "would refuse try-9. if it has topics or consumer groups and is not a sandbox a "
        "redrive marked (try-9.hermes.replay.sandbox)"
    )
    assert not (tmp_path / "home" / "replays").exists()
