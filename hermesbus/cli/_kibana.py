"""``hermesbus kibana import``: the saved objects of ``deploy/kibana/`` into a Kibana.

The data view over the envelopes' data stream, the saved searches (one trace, one
session, failures, dead letters) and the overview dashboard, through Kibana's
saved-objects import API (``kbn-xsrf``, overwrite), into the default space or ``--space``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ._common import console, errors, fail, program_settings

__all__ = ["ASSETS", "app", "import_objects"]

ASSETS = Path(__file__).resolve().parents[2] / "deploy" / "kibana" / "hermes-envelopes.ndjson"
"""The saved objects, as the repository ships them."""

app = typer.Typer(no_args_is_help=True, help="Kibana: import the saved objects for the traces.")


@app.command("import")
def import_command(
    url: Annotated[
        str | None, typer.Option(help="Kibana's URL (default: HERMES_KIBANA_URL).")
    ] = None,
    space: Annotated[str | None, typer.Option(help="A Kibana space (default: default).")] = None,
    file: Annotated[Path, typer.Option(help="The NDJSON file to import.")] = ASSETS,
) -> None:
    """Import (overwrite) the data view, saved searches and dashboard into Kibana.

    An API key, if Kibana needs one, comes from HERMES_KIBANA_API_KEY (never a flag).
    """
    with errors():
        settings = program_settings().bus
        base = url or settings.kibana_url
        if not base:
            raise fail("no Kibana URL: pass --url or set HERMES_KIBANA_URL", 2)
        if not file.is_file():
            raise fail(f"no saved objects at {file}: pass --file deploy/kibana/*.ndjson", 2)
        key = settings.kibana_api_key.get_secret_value() if settings.kibana_api_key else None
        with httpx.Client(timeout=30) as client:
            reply = import_objects(client, base, file, space=space, api_key=key)
    errors_found = reply.get("errors") or []
    for problem in errors_found:
        what = problem.get("error", {}).get("type", "error")
        console.print(f"[red]{problem.get('type')} {problem.get('id')}[/red]: {what}")
    console.print(f"imported {reply.get('successCount', 0)} saved objects into {base}")
    if errors_found or not reply.get("success", False):
        raise typer.Exit(1)


def import_objects(
    client: httpx.Client, base: str, file: Path, *, space: str | None, api_key: str | None
) -> dict[str, Any]:
    """POST the file to the saved-objects import API; Kibana's answer, or why it failed."""
    prefix = f"/s/{space}" if space else ""
    endpoint = f"{base.rstrip('/')}{prefix}/api/saved_objects/_import"
    headers = {"kbn-xsrf": "true"}
    if api_key:
        headers["Authorization"] = f"ApiKey {api_key}"
    files = {"file": (file.name, file.read_bytes(), "application/ndjson")}
    try:
        reply = client.post(endpoint, params={"overwrite": "true"}, headers=headers, files=files)
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach Kibana at {base}: {exc}") from exc
    if reply.status_code >= 400:  # noqa: PLR2004
        raise fail(f"Kibana at {base} refused the import: {reply.status_code} {reply.text[:300]}")
    try:
        answer = reply.json()
    except json.JSONDecodeError as exc:
        raise fail(f"Kibana at {base} answered no JSON: {reply.text[:200]}") from exc
    return answer if isinstance(answer, dict) else {}
