"""Python tools used by the tool processor's tests (run in the worker processes; stdlib only)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any, NamedTuple

HMAC_ENV = "HERMES_TEST_TOOL_HMAC"
"""The processor verifies with this variable; the worker never sees it."""
HMAC_SIGNING_ENV = "HERMES_TEST_TOOL_HMAC_SIGNING"
"""The same secret, under the name the tool's spec passes to its worker."""
ED25519_PRIVATE_ENV = "HERMES_TEST_TOOL_ED25519_PRIVATE"


class Signed(NamedTuple):
    """Duck-typed like SignedResult: the worker only looks at body and signature."""

    body: bytes
    signature: str


class Refused(Exception):
    status_code = 409


def echo(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": arguments.get("text", ""), "verification_steps": ["已回显输入"]}


def counter(arguments: dict[str, Any]) -> dict[str, Any]:
    """Appends a line to ``arguments["path"]``: the test counts the runs."""
    path = Path(arguments["path"])
    with path.open("a", encoding="utf-8") as file:
        file.write("run\n")
    return {"echo": str(len(path.read_text(encoding="utf-8").splitlines()))}


def flaky(arguments: dict[str, Any]) -> dict[str, Any]:
    """Fails (500) while ``arguments["path"]`` exists, answers otherwise."""
    if Path(arguments["path"]).exists():
        raise RuntimeError("the backend is down")
    return {"echo": "fresh"}


def sleepy(arguments: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(arguments.get("seconds", 0)))
    return {"echo": "slept"}


def hog(arguments: dict[str, Any]) -> dict[str, Any]:
    block = bytearray(int(arguments["mb"]) * 1024 * 1024)
    return {"echo": str(len(block))}


def crash(arguments: dict[str, Any]) -> dict[str, Any]:
    os._exit(7)


def refuse(arguments: dict[str, Any]) -> dict[str, Any]:
    raise Refused("not allowed for this user")


def big(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": "字" * int(arguments["chars"])}


def leaky(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": "the password is hunter2"}


def wrong_shape(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": 42}


def backup(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": "from backup", "verification_steps": ["备用服务已回答"]}


def hmac_signed(arguments: dict[str, Any]) -> Signed:
    body = json.dumps({"echo": arguments.get("text", "")}).encode()
    key = os.environ[HMAC_SIGNING_ENV].encode()
    signature = hmac.new(key, body, hashlib.sha256).hexdigest()
    if arguments.get("tamper"):
        body = json.dumps({"echo": "tampered"}).encode()
    return Signed(body, signature)


def ed25519_signed(arguments: dict[str, Any]) -> Signed:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(os.environ[ED25519_PRIVATE_ENV]))
    body = json.dumps({"echo": arguments.get("text", "")}).encode()
    signature = base64.b64encode(key.sign(body)).decode()
    if arguments.get("tamper"):
        body = body.replace(b"}", b" }")
    return Signed(body, signature)


def probe() -> dict[str, Any]:
    return {"latency_ms": 12.0, "success_rate": 1.0, "quota_remaining": 7}


def slow_probe() -> dict[str, Any]:
    return {"latency_ms": 1500.0, "success_rate": 0.99, "quota_remaining": None}


def broken_probe() -> dict[str, Any]:
    raise RuntimeError("probe down")


def verify(result: dict[str, Any]) -> bool:
    return isinstance(result, dict) and "echo" in result


def verify_not_backup(result: dict[str, Any]) -> bool:
    if result.get("echo") == "veto":
        raise ValueError("vetoed")
    return True


# -- hostile or prying tools (isolation tests) --------------------------------------------


def fd1_writer(arguments: dict[str, Any]) -> dict[str, Any]:
    """Writes to fd 1 directly, as C code would, bypassing ``sys.stdout``."""
    os.write(1, b"noise from C code\n")
    return {"echo": "fd1:" + arguments.get("text", "")}


def subprocess_writer(arguments: dict[str, Any]) -> dict[str, Any]:
    """A subprocess (argv list) inherits fd 1 and writes to it."""
    subprocess.run(["echo", "x"], check=True)
    return {"echo": "sub:" + arguments.get("text", "")}


def protocol_forger(arguments: dict[str, Any]) -> dict[str, Any]:
    """Hunts the worker's protocol pipe and writes a forged answer (or garbage) to it."""
    forged = b"garbage\n" if arguments.get("text") == "garbage" else b'{"id": 999, "ok": false}\n'
    for fd in range(3, 32):
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, forged)
    return {"echo": "forged"}


def forker(arguments: dict[str, Any]) -> dict[str, Any]:
    """Forks a child that keeps the worker's pipes and outlives the timeout."""
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    Path(arguments["path"]).write_text(str(child), encoding="utf-8")
    time.sleep(60)
    return {"echo": "never"}


def environment(arguments: dict[str, Any]) -> dict[str, Any]:
    """The names of the variables the worker sees, and the idempotency key of the call."""
    key = os.environ.get("HERMES_IDEMPOTENCY_KEY", "")
    return {"echo": json.dumps({"names": sorted(os.environ), "key": key})}


def ok_exception(arguments: dict[str, Any]) -> dict[str, Any]:
    raise Claims200("not a success")


class Claims200(Exception):
    status_code = 200


def deep_result(arguments: dict[str, Any]) -> Signed:
    """A result nested 100 000 deep (raw bytes: the worker does not parse them)."""
    return Signed(b"[" * 100_000 + b"]" * 100_000, "")


def pid_verifier(result: dict[str, Any]) -> bool:
    """Writes the pid it runs in to the path the result names."""
    Path(result["echo"]).write_text(str(os.getpid()), encoding="utf-8")
    return True


def slow_verifier(result: dict[str, Any]) -> bool:
    time.sleep(30)
    return True


def gate(arguments: dict[str, Any]) -> dict[str, Any]:
    """Marks itself running in ``arguments["dir"]`` (a file per call), waits there until
    ``open`` exists in it (at most a minute), then answers its worker's pid."""
    folder = Path(arguments["dir"])
    running = folder / f"running-{arguments['n']}"
    running.write_text(str(os.getpid()), encoding="utf-8")
    deadline = time.monotonic() + 60
    while not (folder / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"echo": str(os.getpid())}
