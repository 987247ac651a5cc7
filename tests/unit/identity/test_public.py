"""Signatures apps can check: what a reply signer signs verifies with its public key only."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hermesbus.errors import ConfigError, IdentityError
from hermesbus.identity import (
    PUBLIC_SIGNATURE,
    PUBLIC_SIGNERS,
    SIGNATURE,
    Keyring,
    KeySettings,
    PublicKeys,
    Signer,
    new_key,
)
from hermesbus.processors.protocol import WRITERS
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT

OUT = "p." + CONVERSATION_OUT
KEY, VALUE = b"s1", b"\x00the reply"


def keyring() -> Keyring:
    return Keyring({i: [new_key()] for i in ("app", "conversation", "dispatcher", "tool")})


def test_the_reply_signers_are_who_may_write_the_replies_topic() -> None:
    assert set(WRITERS[CONVERSATION_OUT]) == PUBLIC_SIGNERS


def test_a_reply_signer_signs_replies_twice_and_nothing_else_for_apps() -> None:
    keys = keyring()
    signed = Signer("conversation", keys).sign(OUT, KEY, VALUE, [("x", b"1")])
    assert [k for k, _ in signed] == ["x", SIGNATURE, PUBLIC_SIGNATURE]
    assert PublicKeys.of(keys).verify(OUT, KEY, VALUE, signed) == "conversation"
    ingress = Signer("conversation", keys).sign(CONVERSATION_IN, KEY, VALUE, ())
    assert [k for k, _ in ingress] == [SIGNATURE]
    app = Signer("app", keys).sign(OUT, KEY, VALUE, ())  # an app's key signs no reply
    assert [k for k, _ in app] == [SIGNATURE]


@pytest.mark.parametrize(
    ("topic", "key", "value", "code"),
    [
        (OUT, KEY, VALUE + b"!", "identity.bad_signature"),  # altered
        (OUT, b"s2", VALUE, "identity.bad_signature"),  # moved to another session
        ("other." + CONVERSATION_OUT, KEY, VALUE, "identity.bad_signature"),  # another bus
    ],
)
def test_an_altered_or_moved_reply_does_not_verify(
    topic: str, key: bytes, value: bytes, code: str
) -> None:
    keys = keyring()
    signed = Signer("dispatcher", keys).sign(OUT, KEY, VALUE, ())
    with pytest.raises(IdentityError) as caught:
        PublicKeys.of(keys).verify(topic, key, value, signed)
    assert caught.value.code == code


def test_unsigned_twice_signed_and_foreign_replies_do_not_verify() -> None:
    keys, other = keyring(), keyring()
    public = PublicKeys.of(keys)
    hmac_only = Signer("app", keys).sign(OUT, KEY, VALUE, ())
    foreign = Signer("conversation", other).sign(OUT, KEY, VALUE, ())
    twice = [*foreign, foreign[-1]]
    for headers, code in [
        ((), "identity.unsigned"),
        (hmac_only, "identity.unsigned"),
        (twice, "identity.unsigned"),
        ([(PUBLIC_SIGNATURE, b"v1:conversation:k:short")], "identity.malformed"),
        (foreign, "identity.unknown_key"),
    ]:
        with pytest.raises(IdentityError) as caught:
            public.verify(OUT, KEY, VALUE, headers)
        assert caught.value.code == code, headers


def test_writing_the_keyring_writes_its_public_keys_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = Keyring.ensure(["app", "conversation", "dispatcher"], path)
    public = tmp_path / "public-keys.json"
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    loaded = PublicKeys.load(public)
    assert loaded.identities == ("conversation", "dispatcher")
    assert "secret" not in public.read_text()
    signed = Signer("conversation", keys).sign(OUT, KEY, VALUE, ())
    assert loaded.verify(OUT, KEY, VALUE, signed) == "conversation"
    rotated = Keyring.read(path).rotated("conversation")
    rotated.write(path)  # as `hermesbus keys rotate` does: both live keys are public
    both = PublicKeys.load(public)
    new = Signer("conversation", rotated).sign(OUT, KEY, VALUE, ())
    assert both.verify(OUT, KEY, VALUE, new) == both.verify(OUT, KEY, VALUE, signed)


def test_a_keyring_made_before_public_keys_gets_them_from_ensure(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    Keyring.ensure(["conversation"], path)
    (tmp_path / "public-keys.json").unlink()
    Keyring.ensure(["conversation"], path)
    assert PublicKeys.load(tmp_path / "public-keys.json").identities == ("conversation",)


def test_no_public_keys_is_a_clear_error(tmp_path: Path) -> None:
    environ = {"HERMES_KEYS_FILE": str(tmp_path / "keys.json")}
    public = KeySettings.from_environ(tmp_path / "home", environ).public
    assert public == tmp_path / "public-keys.json"
    with pytest.raises(ConfigError, match=r"no public keys to check replies with: .* beside"):
        PublicKeys.load(public)
    environ["HERMES_PUBLIC_KEYS_FILE"] = str(tmp_path / "given.json")
    public = KeySettings.from_environ(tmp_path / "home", environ).public
    assert public == tmp_path / "given.json"
    (tmp_path / "given.json").write_text('{"version": 1, "keys": {"app": []}}')
    with pytest.raises(ConfigError, match="holds no key of conversation, dispatcher"):
        PublicKeys.load(public)
    (tmp_path / "given.json").write_text(
        '{"version": 1, "keys": {"conversation": [{"kid": "k", "public": "xx"}]}}'
    )
    with pytest.raises(ConfigError, match="not 32 bytes of base64url"):
        PublicKeys.load(public)
