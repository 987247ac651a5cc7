"""Signatures: who signed a record is proven by its key, and any change is noticed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus.errors import ConfigError, IdentityError
from hermesbus.identity import SIGNATURE, Key, Keyring, Signer, Verifier, new_key

TOPIC = "hermes.dispatcher"
KEY = b"sess_456"
VALUE = b"\xc3\x01 an encoded envelope"


def ring(**identities: Key) -> Keyring:
    return Keyring({name: [key] for name, key in identities.items()})


APP, CONVERSATION = new_key(), new_key()
KEYS = ring(app=APP, conversation=CONVERSATION)


def headers(identity: str = "conversation", keys: Keyring = KEYS) -> list[tuple[str, bytes]]:
    return list(Signer(identity, keys).sign(TOPIC, KEY, VALUE, [("trace_id", b"t1")]))


def test_a_signed_record_names_and_proves_its_signer() -> None:
    signed = headers()
    assert signed[0] == ("trace_id", b"t1")
    name, value = signed[1]
    assert name == SIGNATURE
    assert value.startswith(f"v1:conversation:{CONVERSATION.kid}:".encode())
    assert Verifier(KEYS).signer(TOPIC, KEY, VALUE, signed) == "conversation"


@pytest.mark.parametrize(
    ("topic", "key", "value"),
    [
        ("hermes.tool", KEY, VALUE),  # copied to another topic
        (TOPIC, b"sess_other", VALUE),  # another session
        (TOPIC, None, VALUE),
        (TOPIC, KEY, VALUE + b"!"),  # altered body
    ],
)
def test_any_change_of_topic_key_or_value_breaks_the_signature(
    topic: str, key: bytes | None, value: bytes
) -> None:
    with pytest.raises(IdentityError, match=r"identity\.bad_signature"):
        Verifier(KEYS).signer(topic, key, value, headers())


def test_the_signer_cannot_be_swapped_in_the_header() -> None:
    (_, value) = headers("app")[1]
    swapped = value.replace(b"v1:app:", b"v1:conversation:")
    with pytest.raises(IdentityError, match=r"identity\.unknown_key"):  # app's kid, not conv's
        Verifier(KEYS).signer(TOPIC, KEY, VALUE, [(SIGNATURE, swapped)])
    same_kid = ring(app=APP, conversation=Key(APP.kid, CONVERSATION.secret))
    with pytest.raises(IdentityError, match=r"identity\.bad_signature"):
        Verifier(same_kid).signer(TOPIC, KEY, VALUE, [(SIGNATURE, swapped)])


def test_a_key_of_another_keyring_is_refused() -> None:
    stranger = ring(conversation=Key(CONVERSATION.kid, new_key().secret))
    with pytest.raises(IdentityError, match=r"identity\.bad_signature"):
        Verifier(KEYS).signer(TOPIC, KEY, VALUE, headers(keys=stranger))


@pytest.mark.parametrize(
    ("signature", "code"),
    [
        ([], "identity.unsigned"),
        ([(SIGNATURE, b"conversation")], "identity.malformed"),
        ([(SIGNATURE, b"v2:conversation:k:" + b"A" * 43)], "identity.malformed"),
        ([(SIGNATURE, b"v1:conversation:k:" + b"A" * 43)] * 2, "identity.malformed"),
        ([(SIGNATURE, b"v1:memory:k1:" + b"A" * 43)], "identity.unknown_key"),
    ],
)
def test_unsigned_or_malformed_signatures_say_why(
    signature: list[tuple[str, bytes]], code: str
) -> None:
    with pytest.raises(IdentityError) as caught:
        Verifier(KEYS).signer(TOPIC, KEY, VALUE, signature)
    assert caught.value.code == code


@given(st.binary(max_size=300))
def test_junk_in_the_header_is_an_identity_error(junk: bytes) -> None:
    with pytest.raises(IdentityError):
        Verifier(KEYS).signer(TOPIC, KEY, VALUE, [(SIGNATURE, junk)])


def test_a_rotated_key_keeps_the_previous_one_live() -> None:
    once = KEYS.rotated("conversation")
    old_signed, new_signed = headers(), headers(keys=once)
    assert once.kids("conversation")[1] == CONVERSATION.kid
    assert Verifier(once).signer(TOPIC, KEY, VALUE, old_signed) == "conversation"
    assert Verifier(once).signer(TOPIC, KEY, VALUE, new_signed) == "conversation"
    twice = once.rotated("conversation")
    assert len(twice.kids("conversation")) == 2  # the oldest is dropped
    with pytest.raises(IdentityError, match=r"identity\.unknown_key"):
        Verifier(twice).signer(TOPIC, KEY, VALUE, old_signed)


def test_a_verifier_reloads_its_keys_for_an_unknown_key_id() -> None:
    rotated = KEYS.rotated("conversation")
    verifier = Verifier(KEYS, reload=lambda: rotated)
    assert verifier.signer(TOPIC, KEY, VALUE, headers(keys=rotated)) == "conversation"


def test_the_keyring_file_is_private_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "home" / "keys.json"
    made = Keyring.ensure(["app", "tool"], path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert made.identities == ("app", "tool")
    again = Keyring.ensure(["app", "tool", "memory"], path)  # adds, keeps the others
    assert again.kids("app") == made.kids("app")
    assert again.has("memory")
    assert repr(again.signing("app")).count("secret") == 0  # never printed


def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    Keyring.ensure(["app"], path)
    secret = "A" * 43
    env = {"HERMES_KEY_APP": f"new={secret},old={secret}", "HERMES_KEY_TOOL": f"t1={secret}"}
    keys = Keyring.load(path, environ=env)
    assert keys.kids("app") == ("new", "old")
    assert keys.kids("tool") == ("t1",)
    assert "HERMES_KEY_APP" in keys.source


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"HERMES_KEY_APP": "nokid"}, "lacks '='"),
        ({"HERMES_KEY_APP": "k1=c2hvcnQ"}, "has 5 bytes"),
        ({"HERMES_KEY_APP": "k 1=" + "A" * 43}, "key id"),
        ({"HERMES_KEY_APP": "k1=***"}, "not base64url"),
        ({"HERMES_KEY_BAD!": "k1=" + "A" * 43}, "identity 'bad!'"),
    ],
)
def test_bad_keys_in_the_environment_are_config_errors(
    tmp_path: Path, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Keyring.load(tmp_path / "absent.json", environ=environ)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ("[]", "must be"),
        (json.dumps({"keys": {"app": "x"}}), "expected a list"),
        (json.dumps({"keys": {"app": ["x"]}}), "each key is"),
        (json.dumps({"keys": {"app": [{"kid": "k"}]}}), "must be a base64url string"),
    ],
)
def test_a_bad_keyring_file_names_the_file_and_the_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as caught:
        Keyring.read(path)
    assert str(path) in str(caught.value)
