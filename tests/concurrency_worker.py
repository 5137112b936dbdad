"""Subprocess entry point for tests/reliability/test_concurrency.py: race `aadmit` on one thread.

Run as `python tests/concurrency_worker.py KIND TARGET THREAD_ID TASKS SAVERS`:

- KIND is `postgres` (TARGET a DSN) or `sqlite` (TARGET a file path);
- TASKS asyncio tasks admit THREAD_ID in every round;
- SAVERS is `shared` (one `RetainingSaver` over one connection, used by every
  task, as a gateway process would) or `per-task` (one saver and connection per
  task, so even the tasks of one process race across connections).

The protocol is JSON lines. The worker prints `{"ready": ...}` once its savers
are open. For each `{"round": r, "at": t}` on stdin it starts its tasks, lets
them sleep until wall-clock time `t` (so both processes fire together), and
prints `{"round": r, "calls": [...], "logs": [...]}`: per call the reclaimed ids,
the skip reason, the head's checkpoint id, any exception's repr and its start
and end times; `logs` holds every warning `retaining_saver` logged meanwhile
(cleanup failures are logged, not raised). `{"stop": true}` makes it print
`{"counters": [...]}` and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from retaining_saver import RetainingSaver

# Unset: open SQLite as apps do, `AsyncSqliteSaver.from_conn_string(path)`, which is
# `aiosqlite.connect(path)` and so gets sqlite3's default 5 s busy timeout. Set (in
# seconds): open `aiosqlite.connect(path, timeout=...)` instead, to probe other timeouts.
SQLITE_TIMEOUT = os.environ.get("RETAINING_SAVER_SQLITE_TIMEOUT")


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@asynccontextmanager
async def _postgres(dsn: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        yield saver  # the coordinator ran setup() before starting the workers


@asynccontextmanager
async def _sqlite(path: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncExitStack() as stack:
        if SQLITE_TIMEOUT is None:
            saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(path))
        else:
            conn = aiosqlite.connect(path, timeout=float(SQLITE_TIMEOUT))
            saver = AsyncSqliteSaver(await stack.enter_async_context(conn))
        await saver.setup()
        yield saver


def _opener(kind: str, target: str) -> AbstractAsyncContextManager[BaseCheckpointSaver[Any]]:
    if kind == "postgres":
        return _postgres(target)
    if kind == "sqlite":
        return _sqlite(target)
    raise SystemExit(f"unknown kind {kind!r}")


async def _admit(saver: RetainingSaver, thread_id: str, at: float) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, at - time.time()))
    started = time.time()
    try:
        result = await saver.aadmit(thread_id)
    except Exception as error:  # reported, and failed on, by the coordinator
        return {"error": repr(error), "start": started, "end": time.time()}
    return {
        "reclaimed": list(result.reclaimed),
        "skipped": None if result.skipped is None else result.skipped.value,
        "head": result.head_id,
        "error": None,
        "start": started,
        "end": time.time(),
    }


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _lines() -> AsyncIterator[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield json.loads(line)


async def main(kind: str, target: str, thread_id: str, tasks: int, savers: str) -> None:
    captured = _Captured()
    logging.getLogger("retaining_saver").addHandler(captured)
    async with AsyncExitStack() as stack:
        count = 1 if savers == "shared" else tasks
        inners = [await stack.enter_async_context(_opener(kind, target)) for _ in range(count)]
        wrapped = [RetainingSaver(inner, strict=True, admission="explicit") for inner in inners]
        _send({"ready": os.getpid(), "savers": len(wrapped)})
        async for command in _lines():
            if command.get("stop"):
                counters = [dataclasses.asdict(saver.counters) for saver in wrapped]
                _send({"counters": counters})
                return
            captured.messages.clear()
            at = float(command["at"])
            calls = await asyncio.gather(
                *(_admit(wrapped[i % count], thread_id, at) for i in range(tasks))
            )
            _send({"round": command["round"], "calls": calls, "logs": list(captured.messages)})


if __name__ == "__main__":
    kind, target, thread_id, tasks, savers = sys.argv[1:6]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(kind, target, thread_id, int(tasks), savers))
