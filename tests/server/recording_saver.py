"""The checkpointer factory the Agent Server tests give `langgraph dev`: the example's
(examples/agent_server/saver.py), with each call the server makes to a whole-thread or
whole-run method recorded.

Recording goes through instance attributes, so the server's capability test, which
asks the saver's *class*, sees exactly what the example's saver advertises. Each call
appends one JSON line to `RETAINING_SAVER_CALL_LOG`: the method, its arguments, and
what it answered ("returned", or the exception it raised).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

RECORDED = ("adelete_thread", "adelete_for_runs", "acopy_thread", "aprune")

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_server" / "saver.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("agent_server_saver", _EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded(name: str, method: Callable[..., Coroutine[Any, Any, Any]], log: Path) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        entry: dict[str, Any] = {"call": name, "args": [_plain(a) for a in args]}
        entry["kwargs"] = {k: _plain(v) for k, v in kwargs.items()}
        try:
            result = await method(*args, **kwargs)
        except BaseException as error:
            entry["answer"] = f"raised {type(error).__name__}: {error}"
            _append(log, entry)
            raise
        entry["answer"] = "returned"
        _append(log, entry)
        return result

    return call


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    try:
        return [str(v) for v in value]
    except TypeError:
        return str(value)


def _append(log: Path, entry: dict[str, Any]) -> None:
    with log.open("a") as out:
        out.write(json.dumps(entry) + "\n")


@asynccontextmanager
async def make_saver() -> AsyncIterator[Any]:
    """The example's saver, its whole-thread and whole-run calls recorded."""
    log = Path(os.environ["RETAINING_SAVER_CALL_LOG"])
    async with _example().make_saver() as saver:
        for name in RECORDED:
            setattr(saver, name, _recorded(name, getattr(saver, name), log))
        yield saver
