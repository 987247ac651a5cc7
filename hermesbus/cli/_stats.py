"""``hermesbus stats [--follow]``: the diagnostics rollup's windows as a live table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hermesbus.compose.settings import Settings
from hermesbus.compose.stats import Stats, component_lags, read_stats
from hermesbus.processors.diagnostics import Row, Said

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    errors,
    fail,
    kafka_with,
    program_settings,
)

__all__ = ["stats_command"]

_BARS = "▁▂▃▄▅▆▇█"
_ALERTS_SHOWN = 8


def stats_command(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep reading, redrawing the table.")
    ] = False,
    windows: Annotated[
        int, typer.Option(min=1, max=120, help="How many tumbling windows to cover.")
    ] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object (not with --follow).")
    ] = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Rate, p50/p99, errors, confidence and lag per component, tool and flow state.

    Read from the diagnostics rollup's closed windows appended to hermes.diagnostics in
    the last WINDOWS+2 window lengths: the last WINDOWS tumbling windows with records (on
    the records' own time), each key's counts in them as a sparkline; the alerts open now
    (all of hermes.alerts folded), and those raised and cleared in the span. Only records
    signed by their writers are shown. Joins no group.
    """
    with errors():
        if follow and as_json:
            raise fail("--json prints once: leave out --follow", 2)
        settings = program_settings(bootstrap)
        kafka = kafka_with(settings, bootstrap)
        if not kafka.bootstrap:
            raise fail("no broker: pass --bootstrap or set HERMES_KAFKA_BOOTSTRAP", 2)
        settings = settings.with_parts(kafka=kafka)
        if follow:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_follow(settings, prefix, windows))
            return
        stats, lags = asyncio.run(_once(settings, prefix, windows))
        if as_json:
            console.print_json(json.dumps(_json(stats, lags, windows, _judged(settings))))
        else:
            console.print(_view(stats, lags, windows, _judged(settings)))


def _since(settings: Settings, windows: int) -> int:
    """From when the windows are read: their span, and the grace and a window more (a
    window is appended once closed, after its end)."""
    diagnostics = settings.diagnostics
    back = (windows + 2) * diagnostics.tumbling_ms + diagnostics.grace_ms
    return int(time.time() * 1000) - back


async def _once(settings: Settings, prefix: str, windows: int) -> tuple[Stats, dict[str, int]]:
    stats = await read_stats(
        settings.kafka,
        settings.keys.load(),
        prefix=prefix,
        since_ms=_since(settings, windows),
        follow=False,
    )
    return stats, await _lags(settings, prefix, stats, windows)


async def _lags(settings: Settings, prefix: str, stats: Stats, windows: int) -> dict[str, int]:
    tools = [row.name for row in stats.board.rows(windows) if row.kind == "tool"]
    return await component_lags(settings.kafka, prefix, tools)


async def _follow(settings: Settings, prefix: str, windows: int) -> None:
    with Live(Text("reading hermes.diagnostics ..."), console=console, auto_refresh=False) as live:
        shown: dict[str, Any] = {"stats": Stats(), "lags": {}}

        def redraw(stats: Stats) -> None:
            shown["stats"] = stats
            live.update(_view(stats, shown["lags"], windows, _judged(settings)), refresh=True)

        reading = asyncio.create_task(
            read_stats(
                settings.kafka,
                settings.keys.load(),
                prefix=prefix,
                since_ms=_since(settings, windows),
                follow=True,
                changed=redraw,
            )
        )
        try:
            while not reading.done():
                shown["lags"] = await _lags(settings, prefix, shown["stats"], windows)
                redraw(shown["stats"])
                await asyncio.wait({reading}, timeout=2.0)
            reading.result()
        finally:
            reading.cancel()
            await asyncio.wait({reading})


def _judged(settings: Settings) -> frozenset[str]:
    """The health rules judged now: a tool under an open alert of one of them has its
    calls sent to its fallback (an alert left open by a rule since switched off, not)."""
    return frozenset(rule.name for rule in settings.diagnostics.rules() if rule.health)


def _fallback(said: Said, judged: frozenset[str] | None) -> bool:
    """Whether the dispatcher sends the alerted tool's calls to its fallback."""
    health = said.health and said.key.startswith("tool:")
    return health and (judged is None or said.rule in judged)


def _view(
    stats: Stats, lags: dict[str, int], windows: int, judged: frozenset[str] | None = None
) -> Group:
    board = stats.board
    starts = board.starts(windows)
    table = Table(title=_title(starts), title_justify="left")
    for name, justify in (
        ("key", "left"),
        ("rate/s", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("errors", "right"),
        ("confidence", "right"),
        ("lag", "right"),
        ("last windows", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in board.rows(windows):
        table.add_row(*_cells(row, lags.get(row.key)))
    parts: list[Any] = [table]
    if not starts:
        parts.append(Text("no closed window yet (the rollup emits each one after it ends)"))
    open_now = _open(stats)
    parts.append(Text(f"open alerts ({len(open_now) or 'none'})", style="bold"))
    for said in open_now:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(said.since_ms / 1000))
        health = ", its fallback answers" if _fallback(said, judged) else ""
        parts.append(Text(f"  {said.rule}  {said.key}  since {since} UTC{health}"))
    recent = stats.alerts[-_ALERTS_SHOWN:]
    parts.append(
        Text(f"alerts raised and cleared ({len(stats.alerts)} in this span)", style="bold")
    )
    for alert in recent:
        at = time.strftime("%H:%M:%S", time.gmtime(alert.at_ms / 1000))
        parts.append(Text(f"  {at}  {alert.component}  {alert.code}: {alert.message}"))
    if stats.unproven:
        parts.append(Text(f"{stats.unproven} records not shown: their signature is not believed"))
    return Group(*parts)


def _open(stats: Stats) -> list[Said]:
    """The alerts open now, the longest open first."""
    return sorted(stats.open_alerts.open(), key=lambda s: (s.since_ms, s.rule, s.key))


def _title(starts: list[int]) -> str:
    if not starts:
        return "diagnostics"
    first = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(starts[0] / 1000))
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(starts[-1] / 1000))
    return f"diagnostics: the last {len(starts)} windows with records, {first} to {last} UTC"


def _cells(row: Row, lag: int | None) -> list[str]:
    tally = row.tally
    timed = tally.latency.count > 0
    confidence = tally.mean_confidence
    return [
        row.key,
        f"{row.rate:.2f}",
        f"{tally.latency.quantile(0.5):.1f}" if timed else "-",
        f"{tally.latency.quantile(0.99):.1f}" if timed else "-",
        f"{tally.errors} ({tally.error_rate:.0%})",
        f"{confidence:.2f}" if confidence is not None else "-",
        str(lag) if lag is not None else "",
        sparkline(row.counts),
    ]


def sparkline(counts: tuple[int, ...]) -> str:
    """One bar per window, scaled to the largest (a window with none: a space)."""
    top = max(counts, default=0)
    if not top:
        return " " * len(counts)
    return "".join(
        " " if n == 0 else _BARS[min(len(_BARS) - 1, (n * len(_BARS) - 1) // top)] for n in counts
    )


def _json(
    stats: Stats, lags: dict[str, int], windows: int, judged: frozenset[str] | None = None
) -> dict[str, Any]:
    board = stats.board
    rows = []
    for row in board.rows(windows):
        tally = row.tally
        timed = tally.latency.count > 0
        rows.append(
            {
                "key": row.key,
                "kind": row.kind,
                "name": row.name,
                "count": tally.count,
                "rate_per_s": row.rate,
                "p50_ms": tally.latency.quantile(0.5) if timed else None,
                "p99_ms": tally.latency.quantile(0.99) if timed else None,
                "errors": tally.errors,
                "error_rate": tally.error_rate,
                "retries": tally.retries,
                "fallbacks": tally.fallbacks,
                "dead_letters": tally.dead_letters,
                "confidence": tally.mean_confidence,
                "external_calls": tally.external_calls,
                "lag": lags.get(row.key),
                "counts": list(row.counts),
            }
        )
    alerts = [
        {"at_ms": a.at_ms, "component": a.component, "code": a.code, "message": a.message}
        for a in stats.alerts
    ]
    open_now = [
        {
            "rule": said.rule,
            "key": said.key,
            "since_ms": said.since_ms,
            "window_end_ms": said.end_ms,
            "windows": said.windows,
            "health": said.health,
            "fallback": _fallback(said, judged),
        }
        for said in _open(stats)
    ]
    return {
        "window_starts_ms": board.starts(windows),
        "rows": rows,
        "open_alerts": open_now,
        "alerts": alerts,
        "parts": board.parts,
        "unproven": stats.unproven,
    }
