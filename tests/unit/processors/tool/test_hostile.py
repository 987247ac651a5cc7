"""Hostile inputs are answers, never exceptions (an exception would make the runtime run
the call again): deep or huge arguments, deep results, odd signatures, internal faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.contract.payloads import ToolCall
from hermesbus.errors import VerificationError
from hermesbus.processors.tool import (
    SignatureConfig,
    StoredResult,
    ToolService,
    ToolSettings,
    check_signature,
)

from .conftest import MODULES, python_spec
from .test_executor import NO_FALLBACK, NOW, alone, call

DEEP = "[" * 100_000 + "]" * 100_000


def raw(tool: str, key: str, arguments_json: str) -> ToolCall:
    return ToolCall(tool=tool, arguments_json=arguments_json, idempotency_key=key)


async def test_deeply_nested_arguments_are_a_400(tools: ToolService) -> None:
    await tools.register(python_spec("echo", "echo", input_schema={}))
    report = await tools.call(raw("echo", "k", DEEP), now=NOW)
    assert report.result.status_code == 400
    assert "arguments are not JSON" in (report.result.error or "")
    nested_65 = "[" * 65 + "]" * 65  # parses, but deeper than tool_max_json_depth
    deep = await tools.call(raw("echo", "k2", nested_65), now=NOW)
    assert (deep.result.status_code, deep.result.error) == (
        400,
        "arguments are nested deeper than 64",
    )
    assert tools.worker_pid("echo") is None  # nothing ran


async def test_arguments_over_the_cap_are_a_400(tmp_path: Path, environ: dict[str, str]) -> None:
    settings = ToolSettings(home=tmp_path, tool_modules=MODULES, tool_max_arguments_bytes=1024)
    store = SqliteToolStore(settings=settings, book=MarkBook(tmp_path))
    async with ToolService(store, settings, environ=environ) as tools:
        await tools.register(python_spec("echo", "echo"))
        big = await tools.call(call("echo", "k", text="x" * 2000), now=NOW)
        assert (big.result.status_code, big.result.error) == (400, "arguments are over 1024 bytes")
        small = await tools.call(call("echo", "k2", text="x" * 100), now=NOW)
        assert small.result.status_code == 200


async def test_a_deeply_nested_result_is_a_json_verification_failure(tools: ToolService) -> None:
    await tools.register(python_spec("deep", "deep_result", output_schema={}))
    report = await tools.call(alone(call("deep", "k")), now=NOW)
    assert report.result.status_code == 502 and report.result.result_json == "null"
    assert (report.alert or "").startswith("verification failed: json: ")


@pytest.mark.parametrize("signature", ["éé", "ａｂｃ", "\u0000\u00ff"])
def test_a_non_ascii_signature_is_a_verification_error(signature: str) -> None:
    for alg in ("hmac-sha256", "ed25519"):
        config = SignatureConfig(alg=alg, key_env="K")
        with pytest.raises(VerificationError, match="^signature: "):
            check_signature(config, b"{}", signature, {"K": "a2V5"})


class _FailingStore(SqliteToolStore):
    """A real SQLite store whose result lookup breaks (a fault inside ``call``)."""

    async def get_result(self, key: str) -> StoredResult | None:
        raise RuntimeError("disk on fire")


async def test_an_unexpected_error_inside_call_is_a_500_result(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    settings = ToolSettings(home=tmp_path, tool_modules=MODULES)
    store = _FailingStore(settings=settings, book=MarkBook(tmp_path))
    async with ToolService(store, settings, environ=environ) as tools:
        await tools.register(python_spec("echo", "echo", fallback=NO_FALLBACK))
        report = await tools.call(call("echo", "k", text="x"), now=NOW)
    assert report.result.status_code == 500
    assert report.result.error == "internal error: RuntimeError"  # no details leak
    assert json.loads(report.result.result_json) is None
