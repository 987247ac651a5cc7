"""A library user builds everything from one settings object, with no environment at all.

A process started with no ``HERMES_*`` variable (nor any other but ``PATH`` and a ``HOME``
of its own) builds :class:`~hermesbus.compose.settings.Settings` in code, runs the demo
stack from them and asks it a question with a client given the same settings. The answer
comes, and nothing is written outside the state folder the settings name: not the user's
data folder a default would have used.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from hermesbus.processors.tool.demo.fixtures import DEMO_DEPT, DEMO_USER_ID

pytestmark = pytest.mark.timeout(300)

SCRIPT = """
import asyncio
import os
import sys
from pathlib import Path

from hermesbus.client import Client
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import stack
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.processors.protocol import IDENTITIES

assert not [name for name in os.environ if name.startswith("HERMES_")], os.environ


async def main(bootstrap: str, home: str, prefix: str, user: str) -> None:
    kafka = KafkaConfig.model_construct(bootstrap=bootstrap)
    settings = Settings.of(Path(home), kafka=kafka)
    settings.keys.ensure(IDENTITIES)  # the bus's keyring, in the settings' state folder
    async with stack(settings=settings, prefix=prefix, demo=True):
        async with Client(settings=settings, topic_prefix=prefix) as app:
            reply = await app.ask("sess_noenv", user, "我要报上个月去深圳的差旅费", timeout=120)
    print(reply.source)
    print(reply.payload.body.text)


asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_stack_and_a_client_run_from_settings_built_in_code(
    broker: str, tmp_path: Path, unique: str
) -> None:
    script = tmp_path / "noenv.py"
    script.write_text(SCRIPT, encoding="utf-8")
    home, user_home = tmp_path / "state", tmp_path / "user"
    user_home.mkdir()
    # nothing but where programs are and a home folder of its own: no HERMES_*, no XDG_*
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(user_home)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        broker,
        str(home),
        f"noenv-{unique}.",
        DEMO_USER_ID,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(240):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    said = err.decode()
    assert process.returncode == 0, said
    source, text = out.decode().splitlines()
    assert source == "conversation:S2"
    assert f"您所在部门：{DEMO_DEPT}" in text
    assert (home / "keys.json").exists() and (home / "state.sqlite3").exists()
    assert sorted(p.name for p in user_home.rglob("*")) == [], "written outside the state folder"
