"""Hooks: what a spec cannot say, as pure functions from allow-listed modules.

A hook is ``module:function`` where the module is on ``HERMES_TOOL_MODULES`` (the
admission of python tools: no private part, a plain function), or is a built-in
flow's. It is given a copy of the
session's values and returns a JSON value; it does no I/O and reads no clock (the values
carry the turn's time: ``turn.at``), so a replay gets the same answer. A function merely
imported into an allowed module is not admitted: it must be defined there. A hook that
cannot be admitted, raises, or returns what JSON cannot hold is a :class:`HookError`: the
state fails.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from hermesbus.errors import HookError
from hermesbus.processors.tool import module_allowed, private_part

__all__ = ["BUILTIN_HOOKS", "HOOKS_PORT", "MAX_HOOK_BYTES", "HookError", "Hooks"]

HOOKS_PORT: Final = "hooks"
BUILTIN_HOOKS: Final = ("hermesbus.processors.flow.expense_hooks",)
"""The hooks of the flows shipped with hermesbus: always admitted (they are its own)."""
MAX_HOOK_BYTES: Final = 64 * 1024
"""The largest JSON a hook may return (it is kept in the session's state)."""


def _copy(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the session's values (JSON): a hook changing it changes nothing else."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(values))
    except TypeError:  # what JSON cannot hold (none by construction): copied as it is
        return copy.deepcopy(dict(values))
    return copied


class Hooks:
    """``ports["hooks"]``: runs hooks from the modules ``modules`` allows (prefixes), and
    those of the built-in flows."""

    def __init__(self, modules: tuple[str, ...] = ()) -> None:
        self.modules = (*modules, *BUILTIN_HOOKS)
        self._loaded: dict[str, Callable[[Mapping[str, Any]], Any]] = {}

    def function(self, target: str) -> Callable[[Mapping[str, Any]], Any]:
        """The admitted function ``target`` names; HookError says why not."""
        if target in self._loaded:
            return self._loaded[target]
        if (private := private_part(target)) is not None:
            raise HookError(f"hook {target!r} names the private {private!r}")
        if not module_allowed(target, self.modules):
            allowed = ",".join(self.modules) or "(none)"
            raise HookError(
                f"hook {target!r}: its module is not on HERMES_TOOL_MODULES ({allowed})"
            )
        module_name, _, name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise HookError(f"hook {target!r}: cannot import {module_name!r}: {exc}") from exc
        function = getattr(module, name, None)
        if not inspect.isfunction(function) or inspect.iscoroutinefunction(function):
            raise HookError(f"hook {target!r} is not a plain function of {module_name!r}")
        if function.__module__ != module_name:  # imported there (``from shutil import ...``)
            raise HookError(
                f"hook {target!r} is defined in {function.__module__!r}, not in {module_name!r}"
            )
        self._loaded[target] = function
        return function

    def call(self, target: str, values: Mapping[str, Any]) -> Any:
        """``target``'s answer for a copy of ``values`` (JSON, at most MAX_HOOK_BYTES)."""
        function = self.function(target)
        try:
            answer = function(_copy(values))
        except Exception as exc:  # a team's code: its failure is the state's failure
            raise HookError(f"hook {target!r} raised {type(exc).__name__}: {exc}") from exc
        try:
            size = len(json.dumps(answer, ensure_ascii=False, allow_nan=False).encode())
        except (TypeError, ValueError) as exc:
            raise HookError(f"hook {target!r} returned what JSON cannot hold: {exc}") from exc
        if size > MAX_HOOK_BYTES:
            raise HookError(f"hook {target!r} returned {size} bytes: at most {MAX_HOOK_BYTES}")
        return answer
