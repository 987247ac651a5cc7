"""Calling: arguments validated first, results verified before release, idempotent, capped."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from hermesbus.processors.tool import SignatureConfig, ToolService

from . import sample_tools
from .conftest import SAMPLES, python_spec
from .test_executor import NOW, alone, call

STRICT_IN = {
    "type": "object",
    "required": ["text"],
    "properties": {"text": {"type": "string"}, "n": {"type": "integer", "maximum": 3}},
    "additionalProperties": False,
}
PATH_IN = {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}


async def test_arguments_are_validated_before_the_call(tools: ToolService, tmp_path: Path) -> None:
    await tools.register(python_spec("strict", "echo", input_schema=STRICT_IN))
    bad = await tools.call(call("strict", "k", text="hi", n=9), now=NOW)
    assert bad.result.status_code == 400
    assert bad.result.error == "arguments: n: 9 is greater than the maximum of 3"
    assert bad.external_calls == 0 and tools.worker_pid("strict") is None  # never ran
    missing = await tools.call(call("strict", "k2"), now=NOW)
    assert missing.result.error == "arguments: (root): 'text' is a required property"
    ok = await tools.call(call("strict", "k3", text="hi"), now=NOW)
    assert ok.result.status_code == 200 and ok.result.verified
    assert ok.result.verification_steps == ("已回显输入",)
    assert json.loads(ok.result.result_json)["echo"] == "hi"


async def test_a_spec_shared_by_every_call_is_left_as_stored(tools: ToolService) -> None:
    """The store's reads give every call the same parsed spec: nothing a call does may
    change it (or every later call would see the change)."""
    spec = python_spec("strict", "echo", input_schema=STRICT_IN)
    await tools.register(spec)
    for key, arguments in (("k1", {"text": "hi"}), ("k2", {"text": "hi", "n": 9}), ("k3", {})):
        await tools.call(call("strict", key, **arguments), now=NOW)
    shared = await tools.store.get_spec("strict")
    assert shared is not None and shared.model_dump_json() == spec.model_dump_json()
    assert shared is await tools.store.get_spec("strict")
    assert [s for s in await tools.store.list_specs() if s.name == "strict"] == [shared]


async def test_an_unknown_tool_is_404(tools: ToolService) -> None:
    report = await tools.call(call("ghost_tool", "k"), now=NOW)
    assert (report.result.status_code, report.result.tool) == (404, "ghost_tool")


async def test_a_redelivered_call_runs_once(tools: ToolService, tmp_path: Path) -> None:
    await tools.register(python_spec("count", "counter", input_schema=PATH_IN))
    runs = tmp_path / "runs.txt"
    first = await tools.call(call("count", "same-key", path=str(runs)), now=NOW)
    second = await tools.call(call("count", "same-key", path=str(runs)), now=NOW)
    assert runs.read_text().splitlines() == ["run"]
    assert second.result == first.result
    assert second.external_calls == 0
    other = await tools.call(call("count", "other-key", path=str(runs)), now=NOW)
    assert json.loads(other.result.result_json) == {"echo": "2"}


async def test_failures_are_not_stored_so_a_retry_runs_again(
    tools: ToolService, tmp_path: Path
) -> None:
    await tools.register(python_spec("flaky", "flaky", input_schema=PATH_IN))  # mock fallback
    down = tmp_path / "down"
    down.touch()
    arguments = {"path": str(down)}
    failed = await tools.call(call("flaky", "retry-key", **arguments), now=NOW, fallback=False)
    assert failed.result.fallback == "mock"  # the primary failed: its mock answered
    down.unlink()
    retried = await tools.call(call("flaky", "retry-key", **arguments), now=NOW)
    assert retried.result.fallback is None
    assert json.loads(retried.result.result_json) == {"echo": "fresh"}


async def test_results_over_the_cap_are_truncated_with_a_marker(tools: ToolService) -> None:
    chars_in = {"type": "object", "properties": {"chars": {"type": "integer"}}}
    await tools.register(python_spec("big", "big", input_schema=chars_in, max_result_bytes=1024))
    small = await tools.call(call("big", "s", chars=10), now=NOW)
    assert not small.result.truncated
    large = await tools.call(call("big", "l", chars=5000), now=NOW)
    assert large.result.truncated and large.result.verified
    marker = json.loads(large.result.result_json)
    assert marker["truncated"] is True
    assert marker["preview"].startswith('{"echo":"字字')
    assert len(large.result.result_json.encode()) <= 1024


async def test_output_schema_failure_discards_the_result(tools: ToolService) -> None:
    await tools.register(python_spec("shape", "wrong_shape"))
    report = await tools.call(alone(call("shape", "k")), now=NOW)
    assert report.result.status_code == 502
    assert (report.result.verified, report.result.result_json) == (False, "null")
    assert report.result.error == (
        "verification failed: output_schema: echo: 42 is not of type 'string'"
    )
    assert report.alert == report.result.error


async def test_sensitive_words_discard_the_result(tools: ToolService) -> None:
    await tools.register(python_spec("leaky", "leaky", sensitive_words=("HUNTER2",)))
    report = await tools.call(alone(call("leaky", "k")), now=NOW)
    assert report.result.status_code == 502
    assert "sensitive_words" in (report.result.error or "")
    assert "hunter2" not in (report.result.error or "").lower()  # the word is not repeated


async def test_a_verifier_that_raises_discards_the_result(tools: ToolService) -> None:
    await tools.register(python_spec("veto", "echo", verifier=f"{SAMPLES}:verify_not_backup"))
    report = await tools.call(alone(call("veto", "k", text="veto")), now=NOW)
    assert report.result.status_code == 502
    assert "verifier:" in (report.result.error or "") and "vetoed" in (report.result.error or "")


async def test_hmac_signatures_are_checked_over_the_exact_body(
    tools: ToolService, environ: dict[str, str]
) -> None:
    environ[sample_tools.HMAC_ENV] = "s3cret-for-tests"
    environ[sample_tools.HMAC_SIGNING_ENV] = "s3cret-for-tests"
    signature = SignatureConfig(alg="hmac-sha256", key_env=sample_tools.HMAC_ENV)
    env = (sample_tools.HMAC_SIGNING_ENV,)
    await tools.register(python_spec("mac", "hmac_signed", signature=signature, env=env))
    good = await tools.call(call("mac", "g", text="ok"), now=NOW)
    assert good.result.status_code == 200 and good.alert is None
    bad = await tools.call(alone(call("mac", "b", text="ok", tamper=True)), now=NOW)
    assert bad.result.status_code == 502
    assert bad.alert == "verification failed: signature: HMAC-SHA256 does not match the body"
    unsigned = python_spec("mac2", "echo", signature=signature)
    await tools.register(unsigned)
    missing = await tools.call(call("mac2", "m"), now=NOW)
    assert "the result carries no signature" in (missing.alert or "")


async def test_ed25519_signatures_are_checked_with_the_public_key(
    tools: ToolService, environ: dict[str, str]
) -> None:
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    environ[sample_tools.ED25519_PRIVATE_ENV] = base64.b64encode(raw).decode()
    environ["HERMES_TEST_TOOL_ED25519_PUBLIC"] = base64.b64encode(public).decode()
    signature = SignatureConfig(alg="ed25519", key_env="HERMES_TEST_TOOL_ED25519_PUBLIC")
    env = (sample_tools.ED25519_PRIVATE_ENV,)
    await tools.register(python_spec("ed", "ed25519_signed", signature=signature, env=env))
    good = await tools.call(call("ed", "g", text="好"), now=NOW)
    assert good.result.status_code == 200 and good.result.verified
    bad = await tools.call(alone(call("ed", "b", text="好", tamper=True)), now=NOW)
    assert bad.result.status_code == 502
    assert bad.alert == "verification failed: signature: Ed25519 signature does not match the body"
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    environ["HERMES_TEST_TOOL_ED25519_PUBLIC"] = base64.b64encode(other).decode()
    wrong_key = await tools.call(alone(call("ed", "w", text="好")), now=NOW)
    assert wrong_key.result.status_code == 502


async def test_a_signing_key_variable_that_is_unset_fails_verification(
    tools: ToolService, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    environ[sample_tools.HMAC_SIGNING_ENV] = "k"
    environ.pop("HERMES_TEST_UNSET_KEY", None)
    monkeypatch.setenv("HERMES_TEST_UNSET_KEY", "k")  # the process's own: never read
    signature = SignatureConfig(alg="hmac-sha256", key_env="HERMES_TEST_UNSET_KEY")
    env = (sample_tools.HMAC_SIGNING_ENV,)
    await tools.register(python_spec("nokey", "hmac_signed", signature=signature, env=env))
    report = await tools.call(call("nokey", "k"), now=NOW)
    assert report.alert == (
        "verification failed: signature: the key variable HERMES_TEST_UNSET_KEY is not set"
    )


async def test_a_key_reused_with_other_arguments_or_by_another_tool_is_a_409(
    tools: ToolService, tmp_path: Path
) -> None:
    await tools.register(python_spec("count", "counter", input_schema=PATH_IN))
    await tools.register(python_spec("count2", "counter", input_schema=PATH_IN))
    runs, other = tmp_path / "runs.txt", tmp_path / "other.txt"
    first = await tools.call(call("count", "shared", path=str(runs)), now=NOW)
    assert first.result.status_code == 200
    changed = await tools.call(call("count", "shared", path=str(other)), now=NOW)
    assert changed.result.status_code == 409 and changed.result.result_json == "null"
    assert changed.result.error == "idempotency key 'shared' was already used by other arguments"
    stolen = await tools.call(call("count2", "shared", path=str(runs)), now=NOW)
    assert stolen.result.status_code == 409
    assert stolen.result.error == "idempotency key 'shared' was already used by another tool"
    assert runs.read_text().splitlines() == ["run"] and not other.exists()  # neither ran


async def test_stored_results_past_the_retention_are_pruned(
    tools: ToolService, tmp_path: Path
) -> None:
    await tools.register(python_spec("count", "counter", input_schema=PATH_IN))
    runs = tmp_path / "runs.txt"
    await tools.call(call("count", "old", path=str(runs)), now=NOW)
    await tools.call(call("count", "recent", path=str(runs)), now=NOW + timedelta(days=6))
    assert await tools.store.get_result("old") is not None
    await tools.call(call("count", "new", path=str(runs)), now=NOW + timedelta(days=7, hours=1))
    assert await tools.store.get_result("old") is None  # older than 7 days by envelope time
    assert await tools.store.get_result("recent") is not None
    assert await tools.store.get_result("new") is not None


async def test_python_tools_see_the_idempotency_key_only_while_called(
    tools: ToolService,
) -> None:
    await tools.register(python_spec("env", "environment"))
    for key in ("key-a", "key-b"):
        report = await tools.call(call("env", key), now=NOW)
        seen = json.loads(json.loads(report.result.result_json)["echo"])
        assert seen["key"] == key
    probe = await tools.probe_all()
    assert probe["env"].error == ""
