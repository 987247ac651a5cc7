"""Starts a stdio MCP server under the isolation of a python tool's worker, then becomes it.

Run by path (``python _mcp_launch.py CONFIG_JSON``) as the command of the SDK's stdio
transport, which starts it in a session (and process group) of its own; stdlib only.
CONFIG_JSON: ``{"command": [argv], "env": [names], "memory_mb": N, "pidfile": path}``. It
keeps only the variables named (and LC_*) of what it was given, caps the address space at
``memory_mb`` (RLIMIT_AS, inherited by what it runs), writes its pid, and executes the
command in its own place: the server's pid is this process's, and no shell is involved.
Only variable names travel in the arguments (a process's arguments are public); their
values come through the environment.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["main"]


def main(argv: list[str]) -> int:
    import resource  # noqa: PLC0415 - POSIX only

    config = json.loads(argv[1])
    keep = set(config["env"])
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
    limit = int(config["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    pidfile = config.get("pidfile")
    if pidfile:
        with open(pidfile, "w", encoding="ascii") as out:
            out.write(str(os.getpid()))
    command = [str(part) for part in config["command"]]
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - an argv list, never a shell
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]!r}: {exc}\n")
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
