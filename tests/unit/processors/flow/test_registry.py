"""What a reader of the flow registry believes, record by record (the records as the topic
has them; tests/integration/test_flows.py writes them to both brokers)."""

from __future__ import annotations

from pathlib import Path

from hermesbus.identity import Keyring, Signer, Verifier
from hermesbus.processors.flow import Registered, record_key
from tests import signing

from .specs import CONTRACT, changed

TOPIC = "hermes.flows"


Headers = list[tuple[str, bytes]]


def _signed(text: str, keys: Keyring, who: str = "conversation") -> tuple[bytes, bytes, Headers]:
    value = text.encode()
    key = record_key("contract_lookup", int(text.split("version: ")[1][0]), value)
    return key, value, list(Signer(who, keys).sign(TOPIC, key, value, ()))


def _registered() -> Registered:
    return Registered(Verifier(signing.keys()), TOPIC)


def test_the_first_text_of_a_version_is_kept_and_the_next_reported() -> None:
    registry, keys = _registered(), signing.keys()
    first = _signed(CONTRACT, keys)
    other = _signed(changed(CONTRACT, "title: 合同查询", "title: 另一个"), keys)
    assert registry.add(*first, offset=0, timestamp_ms=1) is not None
    assert registry.add(*other, offset=1, timestamp_ms=2) is None
    assert registry.add(*first, offset=2, timestamp_ms=3) is None  # the same again: kept once
    assert registry.get("contract_lookup", 1).offset == 0  # type: ignore[union-attr]
    (conflict,) = registry.conflicts
    assert conflict.offset == 1 and "versions are immutable" in conflict.reason


def test_tombstones_forgeries_and_broken_specs_are_refused_and_never_stop_a_reader() -> None:
    registry, keys = _registered(), signing.keys()
    key, value, headers = _signed(CONTRACT, keys)
    broken = changed(CONTRACT, '"(C-[0-9]{4})"', '"a{99999999999}"')
    bad_key, bad_value, bad_headers = _signed(broken, keys)
    wrong_key = b"contract_lookup:1:0000000000000000"
    records = [
        (key, None, headers),  # a tombstone
        (key, value, ()),  # unsigned
        _signed(CONTRACT, keys, who="app"),  # an app's
        (bad_key, bad_value, bad_headers),  # signed, but no valid spec
        (wrong_key, value, list(Signer("conversation", keys).sign(TOPIC, wrong_key, value, ()))),
        (key, b"\xff\xfe", list(Signer("conversation", keys).sign(TOPIC, key, b"\xff\xfe", ()))),
    ]
    for offset, (k, v, h) in enumerate(records):
        assert registry.add(k, v, h, offset=offset, timestamp_ms=0) is None
    reasons = [r.reason for r in registry.refused]
    assert reasons[0] == "a tombstone: a registered version is never deleted"
    assert reasons[1].startswith("identity.unsigned")
    assert reasons[2] == "signed by 'app': only the conversation registers flows"
    assert "is not a regular expression" in reasons[3]
    assert reasons[4] == f"its key is not {key.decode()} (flow:version:digest)"
    assert reasons[5].startswith("not UTF-8 text")
    assert registry.flows() == []


def test_a_version_signed_with_a_key_rotated_out_stays_taken(tmp_path: Path) -> None:
    old = Keyring.ensure(["conversation"], tmp_path / "old-keys.json")  # not the reader's
    registry = _registered()
    key, value, headers = _signed(CONTRACT, old)
    assert registry.add(key, value, headers, offset=0, timestamp_ms=0) is None
    assert registry.refused[0].reason.startswith("identity.unknown_key")
    digest = key.decode().rpartition(":")[2]
    assert registry.claimed("contract_lookup", 1) == [(digest, 0)]
