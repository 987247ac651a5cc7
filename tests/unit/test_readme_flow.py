"""The README's flow spec is one: it reads, and its machine lints clean against the demo's
tools (the integration suite registers a flow of the same shape on both brokers)."""

from __future__ import annotations

import re
from pathlib import Path

from hermesbus.processors.flow import lint, load_flow
from hermesbus.processors.tool import DEMO_MODULES

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Flows as data: specs and the registry"


def test_the_readme_flow_reads_and_lints_clean() -> None:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"the README has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    (spec_text,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    spec, lines = load_flow(spec_text, "README.md")
    assert (spec.flow, spec.version, [s.id for s in spec.states]) == (
        "parcel_status",
        1,
        ["asked", "looked_up", "closed"],
    )
    assert lint(spec, lines, modules=(DEMO_MODULES,), registered={"org_tool"}) == []
