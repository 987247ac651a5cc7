"""The golden histories (``tests/golden/``) shadow-replayed against the current code.

A divergence fails the suite with the first one: envelope, field path, then and now. If
the change is intended, re-record them: ``.venv/bin/python -m tests.golden.record``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus import Reply
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import REPLAYABLE, shadows
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.replay.bundle import read_bundle
from hermesbus.replay.shadow import shadow
from tests.golden.record import BUNDLES, HERE

ENDINGS = {"demo-a.tar.gz": "已提交报销单", "demo-b.tar.gz": "未完成报销流程"}
"""What the last reply of each recorded conversation says: A submitted, B kept unfinished."""


@pytest.mark.parametrize("name", BUNDLES)
async def test_the_golden_history_replays_without_divergence(name: str) -> None:
    bundle = read_bundle(HERE / name)
    recording = bundle.recording()
    replies = [
        h.envelope.payload.body
        for h in recording.hops
        if isinstance(h.envelope.payload.body, Reply)
    ]
    assert ENDINGS[name] in replies[-1].text  # the history is the conversation it claims
    async with shadows(Settings.from_environment(), prefix=bundle.prefix) as wired:
        report = await shadow(
            recording,
            wired,
            sessions=bundle.sessions,
            policy=ProtocolPolicy(),
            prefix=bundle.prefix,
        )
    lines = [line for d in report.divergences for line in d.lines()]
    advice = "intended? re-record: .venv/bin/python -m tests.golden.record"
    assert not report.diverged, "\n".join([*lines, advice])
    assert set(report.compared) == set(REPLAYABLE) and all(report.compared.values())


def test_the_golden_folder_holds_exactly_the_recorded_bundles() -> None:
    found = sorted(p.name for p in Path(HERE).glob("*.tar.gz"))
    assert found == sorted(BUNDLES)
