"""``hermesbus export SESSION -o bundle.tar.gz``: a session to replay anywhere."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from hermesbus.compose.backends import trace_index
from hermesbus.compose.flows import FlowCopy, copies_of, flow_copies
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import REPLAYABLE
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import HermesError
from hermesbus.replay.bundle import same_user, write_bundle
from hermesbus.replay.shadow import documents
from hermesbus.trace.index import Document

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    err_console,
    errors,
    fail,
    kafka_with,
    program_settings,
    shown,
)
from ._sources import read_sessions

__all__ = ["export_command"]


def export_command(
    session_id: Annotated[str, typer.Argument(help="The session to export (the Kafka key).")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the bundle (.tar.gz).")
    ],
    source: Annotated[
        str,
        typer.Option(help="Where to read: broker, archive (the trace index) or auto."),
    ] = "auto",
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Write a session's records, the writer schemas they need and their trace index
    documents to one file, for `hermesbus replay --bundle FILE --shadow` on any machine.

    Memory's records of the same user up to the session's end come along (memory's
    stores span sessions and a replay rebuilds them); no other user's records do.
    """
    if not session_id.strip():
        raise fail("no session id: pass the session_id of a conversation", 2)
    if source not in ("auto", "broker", "archive"):
        raise fail(f"--source {source!r}: use broker, archive or auto", 2)
    if output.is_dir():
        raise fail(f"-o {output} is a folder: give the bundle's file name", 2)
    memory_topic = prefix + REPLAYABLE["memory"]
    with errors():
        settings = program_settings(bootstrap)
        found = asyncio.run(
            read_sessions(settings, source, bootstrap, prefix, [session_id], None, [memory_topic])
        )
        records = same_user(found.records, [session_id], memory_topic, codec=found.codec)
        own = sum(1 for r in records if r.key == session_id.encode())
        if not own:
            raise fail(f"no record of session {session_id!r} in {found.where}: check the id")
        kept = {record.id for record in records}
        docs = found.documents or asyncio.run(_index_documents(settings, session_id, memory_topic))
        docs = [doc for doc in docs if doc.get("_id") in kept]
        needed = found.recording(prefix).flows([session_id])
        flows = asyncio.run(_flows(settings, bootstrap, prefix, needed)) if needed else []
        _lacking(needed, flows)
        manifest = write_bundle(
            output,
            records,
            sessions=[session_id],
            source=found.where,
            prefix=prefix,
            documents=docs,
            codec=found.codec,
            flows=[copy.entry() for copy in flows],
        )
    console.print(
        shown(
            f"exported {manifest['records']} records ({own} of session {session_id}, "
            f"{manifest['records'] - own} of memory for the same user) and "
            f"{manifest['documents']} index documents from {found.where} to {output}"
        ),
        soft_wrap=True,
    )
    if manifest["flows"]:
        console.print(shown(f"with its flows: {', '.join(manifest['flows'])}"), soft_wrap=True)
    console.print(shown(f"replay it: hermesbus replay --bundle {output} --shadow"), soft_wrap=True)


def _lacking(needed: dict[str, set[int]], flows: list[FlowCopy]) -> None:
    """Say which versions the session ran that the bundle will not carry."""
    held = {(copy.spec.flow, copy.spec.version) for copy in flows}
    lacking = sorted(
        f"{f} v{v}" for f, versions in needed.items() for v in versions if (f, v) not in held
    )
    if lacking:
        err_console.print(
            shown(
                f"warning: the bundle carries no copy of flow {', '.join(lacking)} (neither the "
                "registry nor the state folder's copies hold it): its replay will need the "
                "bus's registry"
            ),
            soft_wrap=True,
        )


async def _flows(
    settings: Settings, bootstrap: str | None, prefix: str, needed: dict[str, set[int]]
) -> list[FlowCopy]:
    """Every version of the flows the session ran, from the bus's registry (or the copies
    its state folder keeps); ConfigError names a version neither holds."""
    kafka = kafka_with(settings, bootstrap)
    copies = flow_copies(settings.home, prefix)
    keys = settings.keys.load()
    return await copies_of(needed, kafka, prefix, keys, copies, complete=False)


async def _index_documents(
    settings: Settings, session_id: str, memory_topic: str
) -> list[Document]:
    """The index's documents when the records came from the broker (none if no index)."""
    index = trace_index(settings, install=False)
    if isinstance(index, SqliteTraceIndex) and not Path(index.where).exists():  # noqa: ASYNC240
        return []
    try:
        async with index:
            return await documents(index, [session_id], every_session_of=[memory_topic])
    except HermesError:
        return []  # the records are what replay needs; documents are a courtesy
