"""``hermesbus acls``: the ACLs a bus needs on a cluster that enforces them."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from hermesbus.compose.acls import COMPONENTS, bus_acls, commands, principals_of
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.acls import Acl, create_acls
from hermesbus.errors import ConfigError

from ._common import PrefixOption, console, errors, fail, kafka_with, program_settings

PrincipalOption = Annotated[
    list[str] | None,
    typer.Option(
        "--principal",
        metavar="COMPONENT=TYPE:NAME",
        help=f"A component's principal if not User:<component> ({', '.join(COMPONENTS)}).",
        show_default=False,
    ),
]


def acls_command(
    prefix: PrefixOption = "",
    principal: PrincipalOption = None,
    exactly_once: Annotated[
        bool,
        typer.Option("--exactly-once", help="Also the transactional ids of exactly-once mode."),
    ] = False,
    bootstrap: Annotated[
        str | None,
        typer.Option(help="HOST:PORT of the cluster; default: HERMES_KAFKA_BOOTSTRAP."),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply", help="Add them to the cluster (as the principal HERMES_KAFKA_* name)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per ACL.")] = False,
) -> None:
    """Print the ACLs of a bus on a secured cluster, one principal per component.

    From the topic catalog and the table of who writes which topic (the one every processor
    checks signatures against): each processor reads its own topic in its own group and
    writes only where that table lets it; an app writes only the ingress topic and reads
    the replies. Printed as kafka-acls.sh commands (--json: as data), for an operator to
    apply exactly those; --apply adds them with the admin client.
    """
    with errors():
        given: dict[str, str] = {}
        for pair in principal or ():
            component, equals, name = pair.partition("=")
            if not equals:
                raise fail(
                    f"--principal {pair}: use COMPONENT=TYPE:NAME (conversation=User:svc-conv)", 2
                )
            given[component] = name
        try:
            who = principals_of(given)
        except ConfigError as exc:
            raise fail(str(exc), 2) from exc
        acls = bus_acls(prefix, who, exactly_once=exactly_once)
        if apply:
            config = kafka_with(program_settings(bootstrap), bootstrap)
            asyncio.run(_apply(config, acls))
            principals = len(set(who.values()))
            console.print(
                f"added {len(acls)} ACLs for {principals} principals on {config.bootstrap}"
            )
            return
    if as_json:
        for acl in acls:
            row = {
                "principal": acl.principal,
                "operation": acl.operation,
                "resource": acl.resource,
                "name": acl.name,
                "pattern": "prefixed" if acl.prefixed else "literal",
            }
            console.print(json.dumps(row), soft_wrap=True)
        return
    shown = bootstrap or "BROKER:PORT"
    for name in dict.fromkeys(who[c] for c in COMPONENTS):  # in the components' order
        mine = [acl for acl in acls if acl.principal == name]
        of = ", ".join(c for c in COMPONENTS if who[c] == name)
        console.print(f"# {of} ({name}): {len(mine)} ACLs", soft_wrap=True)
        for line in commands(mine, shown):
            console.print(line, soft_wrap=True)


async def _apply(config: KafkaConfig, acls: list[Acl]) -> None:
    async with KafkaAdmin(config) as admin:
        await create_acls(admin.client, acls)
