"""A processor and the indexer are given their settings and keys: none is looked up.

Below the composition layer nothing reads the environment; one given neither ``keys``
nor ``keyring`` is refused, saying which to give.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import ConfigError
from hermesbus.identity import Keyring
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings
from hermesbus.trace.index import Indexer
from tests import signing

KAFKA = KafkaConfig.model_construct(bootstrap="127.0.0.1:9")
SETTINGS = RuntimeSettings.model_construct()


async def nothing(_inp: HandlerInput) -> Outcome:
    return Outcome()


def test_a_processor_is_given_its_keys_or_how_to_load_them(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "state.sqlite3")
    with pytest.raises(ConfigError, match=r"processor conv: give it keys= or keyring="):
        Processor("conv", nothing, ["in"], store=store, kafka=KAFKA, settings=SETTINGS)
    loads = []

    def keyring() -> Keyring:
        loads.append(1)
        return signing.keys()

    made = partial(Processor, store=store, kafka=KAFKA, settings=SETTINGS, identity="conversation")
    given = made("conv", nothing, ["in"], keys=signing.keys())
    loaded = made("conv", nothing, ["in"], keyring=keyring)
    assert (given.name, loaded.name, loads) == ("conv", "conv", [1])


def test_the_indexer_is_given_its_keys_or_how_to_load_them(tmp_path: Path) -> None:
    index = SqliteTraceIndex(tmp_path / "index.sqlite3")
    with pytest.raises(ConfigError, match=r"indexer idx: give it keys= or keyring="):
        Indexer(index, kafka=KAFKA, settings=SETTINGS, group_id="idx")
    assert Indexer(index, kafka=KAFKA, settings=SETTINGS, keyring=signing.keys).name == "indexer"
