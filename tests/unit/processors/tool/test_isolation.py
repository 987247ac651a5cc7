"""Worker isolation: the protocol survives stray output, kills are hard, the environment is
minimal, the verifier runs in the worker, and only allowed modules run at all."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.errors import AdmissionError
from hermesbus.processors.tool import Fallback, ToolService, ToolSettings

from .conftest import SAMPLES, python_spec
from .test_executor import NO_FALLBACK, NOW, PATH_IN_ANY, alone, call


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie nobody reaped (this sandbox's init does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


@pytest.mark.parametrize("function", ["fd1_writer", "subprocess_writer"])
async def test_output_to_fd_1_does_not_corrupt_the_answers(
    tools: ToolService, function: str
) -> None:
    await tools.register(python_spec("noisy", function, fallback=NO_FALLBACK))
    prefix = "fd1:" if function == "fd1_writer" else "sub:"
    for user in ("alice", "bob", "carol"):
        report = await tools.call(call("noisy", f"k-{user}", text=user), now=NOW)
        assert report.result.status_code == 200, report.result.error
        assert json.loads(report.result.result_json) == {"echo": prefix + user}


@pytest.mark.parametrize("forged", ["garbage", "other-id"])
async def test_a_forged_or_garbled_answer_kills_the_worker_and_the_next_call_is_its_own(
    tools: ToolService, forged: str
) -> None:
    await tools.register(python_spec("forger", "protocol_forger", fallback=NO_FALLBACK))
    await tools.register(python_spec("echo", "echo", fallback=NO_FALLBACK))
    report = await tools.call(call("forger", "f", text=forged), now=NOW)
    assert report.result.status_code == 503
    assert "protocol error" in (report.result.error or "")
    assert tools.worker_pid("forger") is None  # never trusted again
    again = await tools.call(call("forger", "f2", text="x"), now=NOW)  # a fresh worker
    assert again.result.status_code == 503  # it forges again, and is caught again
    echoed = await tools.call(call("echo", "e", text="mine"), now=NOW)
    assert json.loads(echoed.result.result_json) == {
        "echo": "mine",
        "verification_steps": ["已回显输入"],
    }


async def test_a_timeout_kills_the_whole_process_group_at_once(
    tools: ToolService, tmp_path: Path
) -> None:
    spec = python_spec("forker", "forker", input_schema=PATH_IN_ANY, timeout_s=2.0)
    await tools.register(spec.model_copy(update={"fallback": NO_FALLBACK}))
    child_file = tmp_path / "child.pid"
    start = time.perf_counter()
    report = await tools.call(call("forker", "k", path=str(child_file)), now=NOW)
    took = time.perf_counter() - start
    assert report.result.status_code == 504
    assert took < 6.0, f"the timeout took {took:.1f} s"
    child = int(child_file.read_text())
    for _ in range(50):  # SIGKILL is delivered asynchronously
        if gone(child):
            break
        await asyncio.sleep(0.05)
    assert gone(child), "the tool's child outlived the kill"
    assert tools.worker_pid("forker") is None


async def test_the_worker_sees_a_minimal_environment(
    tools: ToolService, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    environ["HERMES_KAFKA_SASL_PASSWORD"] = "broker-secret"  # noqa: S105 - a test value
    environ["HERMES_TEST_VERIFY_KEY"] = "verification-secret"
    environ["HERMES_TEST_PASSED"] = "named-by-the-spec"
    monkeypatch.setenv("HERMES_TEST_PROCESS_ONLY", "not-handed-to-the-service")
    named = ("HERMES_TEST_PASSED", "HERMES_TEST_PROCESS_ONLY")
    spec = python_spec("env", "environment", env=named)
    await tools.register(spec)
    report = await tools.call(call("env", "the-key"), now=NOW)
    seen = json.loads(json.loads(report.result.result_json)["echo"])
    assert "HERMES_KAFKA_SASL_PASSWORD" not in seen["names"]
    assert "HERMES_TEST_VERIFY_KEY" not in seen["names"]
    assert "HERMES_TEST_PASSED" in seen["names"] and "PATH" in seen["names"]
    assert "HERMES_TEST_PROCESS_ONLY" not in seen["names"]  # only what the service was given
    assert seen["key"] == "the-key"  # the call's idempotency key, for side effects


async def test_a_service_given_no_environment_runs_its_tools_with_none(
    settings: ToolSettings,
) -> None:
    store = SqliteToolStore(settings=settings, book=MarkBook(settings.home))
    async with ToolService(store, settings, environ={}) as tools:
        await tools.register(python_spec("env", "environment", env=("PATH",)))
        report = await tools.call(call("env", "k"), now=NOW)
    assert report.result.status_code == 200, report.result.error
    seen = json.loads(json.loads(report.result.result_json)["echo"])
    assert "PATH" not in seen["names"] and "HOME" not in seen["names"]  # none was given
    assert "PYTHONPATH" in seen["names"]  # the worker's own: it imports the tool with it


async def test_the_verification_key_is_never_passed_to_the_worker(tools: ToolService) -> None:
    from hermesbus.processors.tool import SignatureConfig

    signature = SignatureConfig(alg="hmac-sha256", key_env="HERMES_TEST_VERIFY_KEY")
    spec = python_spec("env2", "environment", signature=signature, env=("HERMES_TEST_VERIFY_KEY",))
    with pytest.raises(AdmissionError, match="env must not pass the verification key"):
        await tools.register(spec)


async def test_an_exception_claiming_status_200_is_a_500(tools: ToolService) -> None:
    await tools.register(python_spec("liar", "ok_exception", fallback=NO_FALLBACK))
    report = await tools.call(call("liar", "k"), now=NOW)
    assert (report.result.status_code, report.alert) == (500, None)
    assert (report.result.error or "").startswith("Claims200: not a success")


async def test_the_verifier_runs_in_the_tool_worker(tools: ToolService, tmp_path: Path) -> None:
    await tools.register(python_spec("ver", "echo", verifier=f"{SAMPLES}:pid_verifier"))
    where = tmp_path / "verifier.pid"
    report = await tools.call(call("ver", "k", text=str(where)), now=NOW)
    assert report.result.status_code == 200 and report.result.verified
    assert int(where.read_text()) == tools.worker_pid("ver") != os.getpid()


async def test_a_slow_verifier_neither_stalls_the_loop_nor_passes(tools: ToolService) -> None:
    spec = python_spec("slowver", "echo", verifier=f"{SAMPLES}:slow_verifier", timeout_s=1.0)
    await tools.register(spec)
    await tools.call(call("slowver", "warm", text="w"), now=NOW)  # the worker's start
    stalls: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        for _ in range(20):
            await asyncio.sleep(0.05)
            now = time.perf_counter()
            stalls.append(now - last)
            last = now

    _, report = await asyncio.gather(
        ticker(), tools.call(alone(call("slowver", "k", text="x")), now=NOW)
    )
    assert max(stalls) < 0.5
    assert report.result.status_code == 502 and report.result.result_json == "null"
    assert report.alert is not None and "timed out after 1 s" in report.alert
    assert report.alert.startswith("verification failed: verifier: ")


async def test_only_modules_on_the_allow_list_are_admitted(tools: ToolService) -> None:
    with pytest.raises(AdmissionError) as refused:
        await tools.register(python_spec("os_tool", "echo", target="os:system"))
    assert "python target module 'os' is not on HERMES_TOOL_MODULES" in str(refused.value)
    with pytest.raises(AdmissionError, match="verifier module 'json' is not on"):
        await tools.register(python_spec("v", "echo", verifier="json:loads"))
    backup = Fallback(strategy="proxy", backup="subprocess:run")
    with pytest.raises(AdmissionError, match="proxy backup module 'subprocess' is not on"):
        await tools.register(python_spec("b", "echo", fallback=backup))


async def test_a_stored_spec_naming_a_forbidden_module_is_refused_at_call_time(
    tools: ToolService, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    planted = python_spec("planted", "counter", input_schema=PATH_IN_ANY)
    planted = planted.model_copy(update={"target": "os:remove"})  # never admitted
    await tools.store.save_spec(planted)
    marker.touch()
    report = await tools.call(call("planted", "k", path=str(marker)), now=NOW)
    assert report.result.status_code == 403
    assert "python target module 'os' is not on HERMES_TOOL_MODULES" in (report.result.error or "")
    assert marker.exists() and tools.worker_pid("planted") is None


def test_the_demo_modules_are_allowed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from hermesbus.processors.tool import ToolSettings

    monkeypatch.delenv("HERMES_TOOL_MODULES")
    assert ToolSettings().modules == ("hermesbus.processors.tool.demo",)


DEMO = "hermesbus.processors.tool.demo.tools"


@pytest.mark.parametrize(
    ("field", "value", "private"),
    [
        ("target", f"{DEMO}:_signed", "_signed"),  # a signing oracle for any arguments
        ("target", f"{SAMPLES}:__builtins__", "__builtins__"),
        ("target", "hermesbus.processors.tool.demo._specs:register_demo", "_specs"),
        ("target", "tests.unit.processors.tool._hidden:echo", "_hidden"),
        ("health", f"{DEMO}:_user", "_user"),
        ("verifier", f"{SAMPLES}:_verify", "_verify"),
        ("fallback", Fallback(strategy="proxy", backup=f"{DEMO}:_signed"), "_signed"),
    ],
)
async def test_a_private_callable_is_refused_even_in_an_allowed_module(
    tools: ToolService, field: str, value: object, private: str
) -> None:
    with pytest.raises(AdmissionError) as refused:
        await tools.register(python_spec("priv", "echo", **{field: value}))
    message = str(refused.value)
    assert f"names the private {private!r}: a name starting with _ is never a tool" in message
    assert "is not on HERMES_TOOL_MODULES" not in message  # the module is allowed
    assert await tools.registry.get("priv") is None


async def test_a_public_callable_beside_private_ones_is_admitted(tools: ToolService) -> None:
    admitted = await tools.register(python_spec("pub", "echo", target=f"{SAMPLES}:echo"))
    assert admitted.target == f"{SAMPLES}:echo"


async def test_a_stored_spec_naming_a_private_callable_neither_runs_nor_probes(
    tools: ToolService,
) -> None:
    planted = python_spec("oracle", "echo", fallback=NO_FALLBACK)
    planted = planted.model_copy(update={"target": f"{DEMO}:_signed"})  # never admitted
    await tools.store.save_spec(planted)
    report = await tools.call(call("oracle", "k", text="anything"), now=NOW)
    assert report.result.status_code == 403
    assert "python target 'hermesbus.processors.tool.demo.tools:_signed' names the private" in (
        report.result.error or ""
    )
    probe = await tools.probe(planted)
    assert "names the private '_signed'" in (probe.error or "")
    assert tools.worker_pid("oracle") is None
