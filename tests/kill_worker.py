"""Subprocess entry point for tests/reliability/test_kills.py: die by SIGKILL inside a deletion.

Run as `python tests/kill_worker.py`. Importing LangGraph costs about two
seconds, so this process imports everything once and then serves: for each
JSON line on stdin it forks a fresh child, which opens its own connection,
carries out one operation and, at the chosen moment, SIGKILLs itself. The
child is a new OS process whose death the database sees as a crash: open
transactions are never committed or rolled back by it.

A command is `{"kind", "target", "thread_id", "op", "kill_after", "trace"}`:

- `kind` is `sqlite` (`target` a file path, in WAL mode) or `postgres`
  (`target` a DSN; the coordinator ran `setup()`);
- `op` is `turn` (one chat turn through `chat_graph` and a `RetainingSaver`
  with `admission="auto"`, sync), `aturn` (the same with the async saver and
  `ainvoke`), `stamp-turn` (stamp a duration leaf through the wrapper, then a
  turn: on Postgres the admission then takes the stamp it wrote unread, in one
  statement), `engine` / `aengine` (one `enforce_thread_retention` pass with
  `ENGINE_POLICY`);
- `kill_after` is N: the child kills itself right after the N-th statement
  the backend's statement executor (`retaining_saver.backends.<kind>._execute`,
  or `_aexecute` for async Postgres) ran, before anything else happens; 0
  kills before the first; null runs to the end;
- `trace` is a file the child appends one JSON line to per statement (the
  statement's first 60 and last 25 characters, and whether a transaction was open before
  and after it), written unbuffered so that it survives the kill, then a last
  `{"done": ...}` line with what the operation returned.

The reply is one line: `{"pid", "signal", "code"}` (`signal` 9 for a kill).
`{"stop": true}` ends the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import sqlite3
import sys
import threading
import time
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg import pq
from store_kit import ENGINE_POLICY  # tests/ is this script's directory

import retaining_saver.backends.postgres as pg_backend
import retaining_saver.backends.sqlite as sqlite_backend
from retaining_saver import RetainingSaver
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn

TURN_INPUT = 100  # the child's own turn: `user 100`, answered `echo user 100`
CHILD_TIMEOUT = 60.0


class Tracer:
    """Counts the backend's statements, writes each to the trace, and kills on cue."""

    def __init__(self, path: str, kill_after: int | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.kill_after = kill_after
        self.count = 0

    def write(self, line: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def before(self, statement: Any, in_tx: bool) -> int:
        self.count += 1
        if self.kill_after == 0 and self.count == 1:
            die()
        sql = " ".join(str(statement.sql).split())
        deletes = "DELETE FROM" in sql.upper()
        label = sql if len(sql) <= 90 else f"{sql[:60]} ... {sql[-25:]}"
        self.write({"i": self.count, "sql": label, "deletes": deletes, "in_tx": in_tx})
        return self.count

    def after(self, index: int, in_tx: bool) -> None:
        self.write({"i": index, "after_in_tx": in_tx})
        if index == self.kill_after:
            die()


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached: SIGKILL cannot be caught


def _pg_in_tx(cur: Any) -> bool:
    return bool(cur.connection.info.transaction_status != pq.TransactionStatus.IDLE)


def hook(kind: str, tracer: Tracer) -> None:
    """Wrap the backend's statement executor(s) in `tracer`."""
    if kind == "sqlite":
        original = sqlite_backend._execute

        def sqlite_execute(conn: sqlite3.Connection, statement: Any) -> Any:
            index = tracer.before(statement, conn.in_transaction)
            rows = original(conn, statement)
            tracer.after(index, conn.in_transaction)
            return rows

        sqlite_backend._execute = sqlite_execute
        return
    execute, aexecute = pg_backend._execute, pg_backend._aexecute

    def pg_execute(cur: Any, statement: Any) -> Any:
        index = tracer.before(statement, _pg_in_tx(cur))
        rows = execute(cur, statement)
        tracer.after(index, _pg_in_tx(cur))
        return rows

    async def pg_aexecute(cur: Any, statement: Any) -> Any:
        index = tracer.before(statement, _pg_in_tx(cur))
        rows = await aexecute(cur, statement)
        tracer.after(index, _pg_in_tx(cur))
        return rows

    pg_backend._execute = pg_execute
    pg_backend._aexecute = pg_aexecute


def _summary(values: dict[str, Any]) -> dict[str, Any]:
    return {"said": len(values.get("said", [])), "turns": values.get("turns", 0)}


def _run_sync(saver: RetainingSaver, op: str, thread_id: str) -> dict[str, Any]:
    if op in ("engine", "aengine"):
        report = saver.enforce_thread_retention(thread_id, ENGINE_POLICY)
        return {"deleted": sorted(cid for _, cid in report.deleted)}
    if op == "stamp-turn":
        write_duration_leaf(saver, thread_id, "child", 9.0)
    result = chat_graph(saver).invoke(turn(TURN_INPUT), thread(thread_id))
    return {**_summary(result), "counters": saver.counters.reclaimed}


async def _run_async(saver: RetainingSaver, op: str, thread_id: str) -> dict[str, Any]:
    if op == "aengine":
        report = await saver.aenforce_thread_retention(thread_id, ENGINE_POLICY)
        return {"deleted": sorted(cid for _, cid in report.deleted)}
    result = await chat_graph(saver).ainvoke(turn(TURN_INPUT), thread(thread_id))
    return {**_summary(result), "counters": saver.counters.reclaimed}


def _flags(op: str) -> dict[str, Any]:
    return {"strict": True, "admission": "off" if "engine" in op else "auto"}


def run_sync(kind: str, target: str, op: str, thread_id: str) -> dict[str, Any]:
    if kind == "sqlite":
        conn = sqlite3.connect(target, check_same_thread=False)
        try:
            return _run_sync(RetainingSaver(SqliteSaver(conn), **_flags(op)), op, thread_id)
        finally:
            conn.close()
    with PostgresSaver.from_conn_string(target) as inner:
        return _run_sync(RetainingSaver(inner, **_flags(op)), op, thread_id)


async def run_async(kind: str, target: str, op: str, thread_id: str) -> dict[str, Any]:
    if kind == "sqlite":
        async with AsyncSqliteSaver.from_conn_string(target) as inner:
            return await _run_async(RetainingSaver(inner, **_flags(op)), op, thread_id)
    async with AsyncPostgresSaver.from_conn_string(target) as apg:
        return await _run_async(RetainingSaver(apg, **_flags(op)), op, thread_id)


ASYNC_OPS = ("aturn", "aengine")


def child(command: dict[str, Any]) -> None:
    """The forked child: hook, operate, report; killed on cue before it reports."""
    tracer = Tracer(command["trace"], command.get("kill_after"))
    kind, target, op, thread_id = (command[k] for k in ("kind", "target", "op", "thread_id"))
    hook(kind, tracer)
    try:
        if op in ASYNC_OPS:
            done = asyncio.run(run_async(kind, target, op, thread_id))
        else:
            done = run_sync(kind, target, op, thread_id)
    except BaseException as error:
        tracer.write({"error": repr(error)})
        os._exit(1)
    tracer.write({"done": done, "statements": tracer.count})
    os._exit(0)


def _wait(pid: int) -> dict[str, Any]:
    deadline = time.monotonic() + CHILD_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"pid": pid, "signal": None, "code": None, "timeout": True}
        select.select([], [], [], 0.005)
    if os.WIFSIGNALED(status):
        return {"pid": pid, "signal": os.WTERMSIG(status), "code": None}
    return {"pid": pid, "signal": None, "code": os.WEXITSTATUS(status)}


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    # A fork copies only the calling thread: nothing else may be running here.
    assert threading.active_count() == 1, threading.enumerate()
    _send({"ready": os.getpid()})
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("stop"):
            return
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child(command)
            finally:
                os._exit(3)  # child() always exits itself; this is a safety net
        _send(_wait(pid))


if __name__ == "__main__":
    main()
