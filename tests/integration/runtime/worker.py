"""A worker process for the crash test: ``python -m tests.integration.runtime.worker``.

Arguments: bootstrap, topic prefix, the state store (``sqlite:PATH`` or ``redis:URL
PREFIX FOLDER``). Runs the counting handler (with a short pause per envelope, so a SIGKILL lands
mid-stream) until SIGTERM. ``WORKER_GROUP`` in the environment: its consumer group (default
``crash``); ``WORKER_STUCK``: a session whose turns it never finishes (in flight when it is
stopped); its runtime settings take the ``HERMES_RUNTIME_*`` variables it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.runtime import HandlerInput, Outcome, RuntimeSettings

from .support import IN, ConversationProcessor, counting, open_store


async def slow_counting(inp: HandlerInput) -> Outcome:
    if inp.envelope.session_id == os.environ.get("WORKER_STUCK"):
        print(f"stuck at {inp.envelope.message_id}", flush=True)
        await asyncio.Event().wait()  # never finished: only a stop's revoke timeout ends it
    await asyncio.sleep(0.002)
    return await counting(inp)


async def main(bootstrap: str, prefix: str, spec: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with open_store(spec) as store:
        processor = ConversationProcessor(
            "crash",
            slow_counting,
            [IN],
            store=store,
            kafka=KafkaConfig(bootstrap=bootstrap),
            topic_prefix=prefix,
            settings=RuntimeSettings(max_in_flight=16),
            group_id=os.environ.get("WORKER_GROUP") or None,
        )
        async with processor:
            print("started", flush=True)
            with contextlib.suppress(asyncio.CancelledError):
                await stop.wait()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
