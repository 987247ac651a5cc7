"""Session ids: 1 to SESSION_ID_MAX characters, no control character. The Client refuses
others with one clear error before anything is sent; the model (so the codec) too."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hermesbus.client import Client
from hermesbus.codec import Codec
from hermesbus.contract.envelope import SESSION_ID_MAX, SESSION_ID_RULE, check_session_id
from hermesbus.errors import ContractError, EncodeError
from tests.builders import turn

BAD = [
    "s\x1b[2J",
    "s\x1b]0;owned\x07",
    "tab\there",
    "new\nline",
    "del\x7f",
    "csi\x9b2J",
    "rtl\u202eexe",
    "sep\u2028",
    "",
    "x" * (SESSION_ID_MAX + 1),
]
GOOD = ["s1", "会话-42", "user@example.com:web", "x" * SESSION_ID_MAX, "a b"]


def _client() -> Client:
    return Client(bootstrap="broker.invalid:9092", topic_prefix="p.", codec=Codec(), name="t")


@pytest.mark.parametrize("session_id", GOOD)
def test_good_session_ids_are_taken(session_id: str) -> None:
    assert check_session_id(session_id) == session_id
    assert _client().turn(session_id, "u", "hi").session_id == session_id
    codec = Codec()
    assert codec.decode(codec.encode(turn(session_id=session_id))).session_id == session_id


@pytest.mark.parametrize("session_id", BAD)
def test_the_client_refuses_a_bad_session_id_in_one_line(session_id: str) -> None:
    client = _client()
    with pytest.raises(EncodeError) as caught:
        client.turn(session_id, "u", "hi")
    said = str(caught.value)
    assert said.startswith("invalid session_id ")
    assert said.endswith(f"a session id is {SESSION_ID_RULE}")
    assert "\n" not in said and "\x1b" not in said and "\u202e" not in said
    with pytest.raises(EncodeError, match="invalid session_id"):
        client.replies(session_id)
    smuggled = turn().model_copy(update={"session_id": session_id})  # not validated
    with pytest.raises(EncodeError, match="invalid session_id"):
        client.check(smuggled)


@pytest.mark.parametrize("session_id", BAD)
@pytest.mark.parametrize("compiled", [True, False])
def test_the_contract_refuses_a_bad_session_id(session_id: str, compiled: bool) -> None:
    with pytest.raises(ValidationError):
        turn(session_id=session_id)
    codec = Codec(compiled=compiled)
    data = codec.encode(turn().model_copy(update={"session_id": session_id}))
    with pytest.raises(ContractError, match="session_id"):
        codec.decode(data)
