"""What a message shows of a backend's URL: never a secret, all else as written."""

from __future__ import annotations

import pytest

from hermesbus.base.config import without_userinfo


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://redis-1:6379/0", "redis://redis-1:6379/0"),
        ("redis://app:s3cret@redis-1:6379/0", "redis://redis-1:6379/0"),
        ("redis://:s3cret@redis-1/0", "redis://redis-1/0"),
        ("redis://redis-1:6379/0?password=s3cret&db=1", "redis://redis-1:6379/0?password=***&db=1"),
        ("https://es-1:9200/?api_token=t0k&x=1", "https://es-1:9200/?api_token=***&x=1"),
        ("redis://redis-1/0?socket_timeout=5", "redis://redis-1/0?socket_timeout=5"),
    ],
)
def test_a_shown_url_carries_no_secret(url: str, shown: str) -> None:
    assert without_userinfo(url) == shown
    assert "s3cret" not in without_userinfo(url) and "t0k" not in without_userinfo(url)
