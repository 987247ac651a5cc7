"""Why a secured cluster refuses a client a topic (a refused login is ``client.login_refused``,
which starting a client asks when it fails).

The cluster hides the topics a principal may not describe: a Metadata request for every
topic leaves them out, so they read as missing. Asked by name, it says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka.client import NoAutoCreate

__all__ = ["ACLS_HINT", "unauthorized_topics"]

TOPIC_AUTHORIZATION_FAILED = 29
ACLS_HINT = "an operator adds the bus's ACLs: `hermesbus acls --prefix PREFIX` prints them"


async def unauthorized_topics(client: Any, names: Sequence[str]) -> list[str]:
    """Those of ``names`` the cluster says the principal of ``client`` (an aiokafka admin
    client) may not describe: a Metadata request naming them (creating none)."""
    if not names:
        return []
    try:
        response = await client._send_request(NoAutoCreate(list(names)))
    except KafkaError:
        return []  # not answered: the caller's own error stands
    return sorted(entry[1] for entry in response.topics if entry[0] == TOPIC_AUTHORIZATION_FAILED)
