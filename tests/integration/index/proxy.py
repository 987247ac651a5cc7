"""A TCP relay in front of a real server, to take the server away from a client and back.

The server keeps running (and keeps what it stored): the client sees connections refused
while the relay is down, as it would if the server had stopped.
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    """Listens on a loopback port of its own and relays to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0
        self.accepted = 0
        """Connections clients opened through the relay so far."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        self.accepted += 1
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._pipes.discard(task)
            for side in (writer, up_writer):  # both ends: the server's too
                if side is not None:
                    side.close()
                    with contextlib.suppress(Exception):
                        await side.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
