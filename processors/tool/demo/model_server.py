"""A scripted OpenAI-compatible chat-completions server: the model of the demo and tests.

No model weights can be had on the machines this project is built and tested on, so the
model side is exercised against this server, which answers from a script: the n-th answer
of the script for a request whose messages hold n-1 assistant messages (one per earlier
round), so a conversation replayed against it gets the same answers again. An answer is
``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` or ``{"content": "..."}``; text
may name a tool's earlier result as ``{tool:NAME.FIELD}`` (read from the request's tool
messages). Every request is counted and kept (:attr:`ScriptedModel.requests`), and written
as a JSON line to ``--log`` when given.

    python -m hermesbus.processors.tool.demo.model_server --script S.json [--port N] [--log F]

prints ``listening on http://127.0.0.1:PORT/v1`` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

__all__ = ["DEMO_SCRIPT", "ScriptedModel", "main"]

_FIELD: Final = re.compile(r"\{tool:([A-Za-z0-9_.-]+)\.([A-Za-z0-9_]+)\}")
_MAX_BODY: Final = 4 * 1024 * 1024

DEMO_SCRIPT: Final[Sequence[Mapping[str, Any]]] = (
    {"tool_calls": [{"name": "org_tool", "arguments": {"user_id": "u_xyz789"}}]},
    {
        "tool_calls": [
            {"name": "finance_tool", "arguments": {"action": "budget", "user_id": "u_xyz789"}}
        ]
    },
    {
        "content": (
            "{tool:org_tool.name}，您所在的{tool:finance_tool.dept}本月预算余额为 "
            "{tool:finance_tool.budget_remaining} {tool:finance_tool.currency}。"
        )
    },
)
"""The demo's budget assistant: the directory, then the ledger, then the answer."""


class ScriptedModel:
    """The server: start it (a thread), read :attr:`url`, stop it."""

    def __init__(
        self, script: Sequence[Mapping[str, Any]], *, port: int = 0, log: Path | None = None
    ) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._log = log
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root, as ``HERMES_LLM_URL`` takes it."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedModel:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The completion for ``request`` (and count it)."""
        with self._lock:
            self.requests.append(request)
            if self._log is not None:
                with self._log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(request, ensure_ascii=False) + "\n")
        messages = request.get("messages") or []
        rounds = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        step = self.script[min(rounds, len(self.script) - 1)] if self.script else {}
        results = _results(messages)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if "tool_calls" in step:
            message["tool_calls"] = [
                {
                    "id": f"call_{rounds + 1}_{index}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["arguments"]
                        if isinstance(call["arguments"], str)
                        else json.dumps(call["arguments"], ensure_ascii=False),
                    },
                }
                for index, call in enumerate(step["tool_calls"])
            ]
        else:
            message["content"] = _FIELD.sub(
                lambda m: str(results.get(m[1], {}).get(m[2], "?")), str(step.get("content", ""))
            )
        spent = len(json.dumps(request, ensure_ascii=False)) // 4
        return {
            "id": f"scripted-{len(self.requests)}",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": spent, "completion_tokens": 20, "total_tokens": spent + 20},
        }


def _results(messages: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Each tool's latest result in the request: tool name -> its JSON object."""
    names: dict[str, str] = {}
    found: dict[str, dict[str, Any]] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = call.get("function", {}).get("name", "")
        if message.get("role") == "tool":
            try:
                value = json.loads(message.get("content") or "")
            except ValueError:
                continue
            if isinstance(value, dict):
                found[names.get(message.get("tool_call_id", ""), "")] = value
    return found


def _handler_for(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._send(413, {"error": {"message": "request too large"}})
                return
            try:
                request = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, {"error": {"message": "the body is not JSON"}})
                return
            self._send(200, model.answer(request if isinstance(request, dict) else {}))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible model server.")
    parser.add_argument("--script", type=Path, help="a JSON list of answers (default: the demo's)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, help="append each request here as a JSON line")
    args = parser.parse_args(argv)
    script = DEMO_SCRIPT
    if args.script is not None:
        try:
            script = json.loads(args.script.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"model_server: cannot read {args.script}: {exc}", file=sys.stderr)
            return 2
    model = ScriptedModel(script, port=args.port, log=args.log).start()
    print(f"listening on {model.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
