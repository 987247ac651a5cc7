"""Where spans go: the endpoint and headers are checked at the start, secrets never leave
over plain http to another host, and no endpoint means no exporter. (Spans really
exported and decoded: tests/integration/test_telemetry.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.compose.otel import OtelSettings, exporting
from hermesbus.compose.settings import Settings
from hermesbus.errors import ConfigError


def test_the_endpoint_is_an_http_url_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://127.0.0.1:4318/")
    assert OtelSettings().endpoint == "http://127.0.0.1:4318"
    for bad, said in (
        ("ftp://collector:4318", "not an http"),
        ("collector:4318", "not an http"),
        ("https://user:pw@collector:4318", "no credentials"),
    ):
        monkeypatch.setenv("HERMES_OTEL_ENDPOINT", bad)
        with pytest.raises(ValueError, match=said):
            OtelSettings()


def test_headers_are_a_secret_sent_only_over_https_or_to_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERMES_OTEL_HEADERS", "Authorization=Basic c2VjcmV0, x-team = bus")
    for endpoint in (
        "https://collector.example:4318",
        "http://127.0.0.1:4318",
        "http://[::1]:4318",
    ):
        monkeypatch.setenv("HERMES_OTEL_ENDPOINT", endpoint)
        read = OtelSettings()
        assert read.header_map() == {"Authorization": "Basic c2VjcmV0", "x-team": "bus"}
        assert "c2VjcmV0" not in repr(read)
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://collector.example:4318")
    with pytest.raises(ConfigError, match=r"only over https or to a loopback collector"):
        OtelSettings().header_map()
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "https://collector.example:4318")
    monkeypatch.setenv("HERMES_OTEL_HEADERS", "no-equals-sign")
    with pytest.raises(ConfigError, match=r"name=value"):
        OtelSettings().header_map()


async def test_no_endpoint_no_exporter() -> None:
    async with exporting(OtelSettings()) as spans:
        assert spans is None


def test_a_redrives_sandbox_exports_no_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "bus"))
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://127.0.0.1:4318")
    bus = Settings.from_environment()
    assert bus.otel.endpoint == "http://127.0.0.1:4318"
    assert bus.sandbox(tmp_path / "sandbox").otel.endpoint is None
