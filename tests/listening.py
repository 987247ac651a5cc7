"""A server the tests start as a process of its own, on a free port of 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["listening"]


@contextmanager
def listening(
    argv: Callable[[int], list[str]], env: Mapping[str, str], log: Path, *, within_s: float = 60
) -> Iterator[int]:
    """Run ``argv(port)`` on a free port, its output in ``log``, until it listens (the test
    fails, showing the log, when it exits first or does not listen ``within_s``); the port.
    It is stopped (SIGTERM, then SIGKILL after 10 s) when the block ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with log.open("wb") as out:  # the child keeps its own copy
        proc = subprocess.Popen(argv(port), env=dict(env), stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + within_s
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{argv(port)[:4]} did not listen on {port}: {log.read_text()}")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
