"""Kill suite: a process SIGKILLed inside a deletion leaves a whole store behind.

A child process (tests/kill_worker.py; one server per test imports once and
forks a fresh child per kill) runs one operation on a real store: a chat turn
through a `RetainingSaver` whose admission deletes the stamps on the thread's
head (sync, async, and on Postgres the one-statement take of a stamp the
child wrote itself), or one engine pass that grafts a duration link, prunes a
superseded regenerate branch and deletes a trailing stamp in one transaction.
The child wraps the backend's statement executor and SIGKILLs itself right
after its N-th statement: before the first, between any two statements of a
deleting transaction (after the DELETE, before the COMMIT), and right after
the COMMIT. The statements are first traced by a child that is not killed, and
every boundary of that trace is killed once, on a fresh copy of the store
(SQLite: the prepared file copied; Postgres: the prepared thread copied into a
new thread of one database).

After each kill the store must be exactly one of the states a sequence of
whole transactions gives (nothing deleted, or one, two... stamps each
deleted with its reclaim record; for the engine, nothing or its whole plan),
integrity must be clean, every checkpoint and head must load, a read pinned
to a reclaimed id must still answer, and a new run through the wrapper must
succeed with the expected message count and leave no stamp behind.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from store_kit import (
    NEW,
    SHAPES,
    PostgresStore,
    Shape,
    Snapshot,
    SqliteStore,
    engine_after,
    matching,
    new_records,
    normalised,
    snap_diff,
    stack_states,
)

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

WORKER = Path(__file__).parents[1] / "kill_worker.py"  # tests/, beside the kits it imports
REPO = WORKER.parent.parent
REPLY_TIMEOUT = 90.0


# The child


class KillServer:
    """tests/kill_worker.py, spoken to in JSON lines."""

    def __init__(self, stderr: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.stderr = stderr
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=str(REPO),
                env=env,
            )
        assert "ready" in self._receive()

    def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            raise AssertionError(
                f"kill worker sent nothing (exit {self.proc.poll()}); stderr:\n"
                + self.stderr.read_text(errors="replace")
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()
        return self._receive()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"stop": true}\n')
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KillServer]:
    worker = KillServer(tmp_path / "kill-worker.stderr")
    yield worker
    worker.close()


@dataclass(frozen=True)
class Trace:
    """What one child did: its statements, whether a transaction was open after each,
    and what it returned if it lived."""

    statements: list[str]
    deletes: list[bool]
    open_after: list[bool]
    done: dict[str, Any] | None
    error: str | None


def read_trace(path: Path) -> Trace:
    statements: list[str] = []
    deletes: list[bool] = []
    open_after: list[bool] = []
    done = error = None
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "sql" in entry:
            statements.append(entry["sql"])
            deletes.append(entry["deletes"])
        elif "after_in_tx" in entry:
            open_after.append(entry["after_in_tx"])
        elif "done" in entry:
            done = entry["done"]
        elif "error" in entry:
            error = entry["error"]
    return Trace(statements, deletes, open_after, done, error)


OP_SHAPE = {
    "turn": "admission",
    "aturn": "admission",
    "stamp-turn": "stamp",
    "engine": "engine",
    "aengine": "engine",
}


# The checks after each kill


def verify_store(
    store: Any, target: str, thread_id: str, shape: Shape, snap: Snapshot, label: str
) -> None:
    with store.bare(target) as bare:
        found = integrity(bare, thread_id)
        assert found.clean, f"{label}: integrity {found}"
        saver = RetainingSaver(bare, strict=True)
        head = saver.get_tuple(thread(thread_id))
        assert head is not None, f"{label}: the head does not load"
        for ns, cid, _ in snap.checkpoints:
            if cid == NEW:
                continue
            config: Any = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            }
            assert saver.get_tuple(config) is not None, f"{label}: {cid} does not load"
        for _, cid, _ in snap.reclaimed:
            if cid != NEW:
                pinned = saver.get_tuple(thread(thread_id, cid))
                assert pinned is not None, f"{label}: reclaimed {cid} no longer resolves"
        result = chat_graph(saver).invoke(turn(200), thread(thread_id))
        assert len(result["said"]) == shape.said + 2, f"{label}: said {result['said']}"
        assert result["said"][-2:] == ["user 200", "echo user 200"], label
        assert result["turns"] == shape.turns + 1, label
        after = integrity(bare, thread_id)
        assert after.clean, f"{label}: integrity after the new run {after}"
        rows = list(bare.list(thread(thread_id)))
        parents = {
            str(t.parent_config["configurable"]["checkpoint_id"]) for t in rows if t.parent_config
        }
        left = [
            t.checkpoint["id"]
            for t in rows
            if t.metadata.get("source") == "update" and t.checkpoint["id"] not in parents
        ]
        assert not left, f"{label}: the new run left trailing stamps {left}"


@dataclass
class Tally:
    kills: int = 0
    inside_transaction: int = 0
    survived: Counter[str] = field(default_factory=Counter)


def kill_every_statement(store: Any, server: KillServer, op: str, trace_dir: Path) -> Tally:
    """Trace `op` once, then kill it after each of its statements; check every kill."""
    name = OP_SHAPE[op]
    shape: Shape = store.shapes[name]

    def command(target: str, thread_id: str, kill_after: int | None, trace: Path) -> Any:
        return server.run(
            {
                "kind": store.kind,
                "op": op,
                "target": target,
                "thread_id": thread_id,
                "kill_after": kill_after,
                "trace": str(trace),
            }
        )

    target, thread_id = store.copy(name)
    base = store.snapshot(target, thread_id)
    trace_file = trace_dir / f"{op}-trace.jsonl"
    reply = command(target, thread_id, None, trace_file)
    traced = read_trace(trace_file)
    assert reply["code"] == 0 and traced.error is None, (reply, traced)
    assert traced.done is not None
    assert any(traced.deletes), f"{op} ran no deleting statement: {traced.statements}"
    final = store.snapshot(target, thread_id)
    if "engine" in op:
        states = {"plan not carried out": base, "whole plan carried out": final}
        assert final == engine_after(base, shape.planned), "the traced pass did not do its plan"
    else:
        assert traced.done["said"] == shape.said + 2
        records = new_records(base, final)
        assert {r[1] for r in records} == set(shape.stack), (records, shape.stack)
        states = stack_states(base, shape, records)
    store.discard(target)

    tally = Tally()
    for k in range(len(traced.statements) + 1):
        where = "before the first statement" if k == 0 else f"after {traced.statements[k - 1]!r}"
        label = f"{store.kind} {op} killed {where} (#{k})"
        target, thread_id = store.copy(name)
        trace_file = trace_dir / f"{op}-{k}.jsonl"
        reply = command(target, thread_id, k, trace_file)
        assert reply["signal"] == 9, f"{label}: the child was not killed: {reply}"
        killed = read_trace(trace_file)
        assert killed.statements == traced.statements[:k], f"{label}: took another path"
        snap = normalised(store.snapshot(target, thread_id), base)
        state = matching(states, snap)
        assert state is not None, (
            f"{label}: the store is in no state whole transactions reach: {snap_diff(base, snap)}"
        )
        verify_store(store, target, thread_id, shape, snap, label)
        store.discard(target)
        tally.kills += 1
        tally.inside_transaction += bool(k and killed.open_after and killed.open_after[-1])
        tally.survived[f"{op}: {state}"] += 1
    return tally


def run_suite(store: Any, server: KillServer, ops: tuple[str, ...], tmp_path: Path) -> Tally:
    for name in sorted({OP_SHAPE[op] for op in ops}):
        store.build(name, SHAPES[name])
    total = Tally()
    started = time.monotonic()
    for op in ops:
        tally = kill_every_statement(store, server, op, tmp_path)
        total.kills += tally.kills
        total.inside_transaction += tally.inside_transaction
        total.survived.update(tally.survived)
    elapsed = time.monotonic() - started
    print(
        f"\n{store.kind}: {total.kills} kills ({total.inside_transaction} with a transaction "
        f"open) in {elapsed:.1f}s; survived: {dict(sorted(total.survived.items()))}"
    )
    return total


SQLITE_OPS = ("turn", "aturn", "engine")
POSTGRES_OPS = ("turn", "aturn", "stamp-turn", "engine", "aengine")


def test_kills_sqlite(tmp_path: Path, server: KillServer) -> None:
    store = SqliteStore(tmp_path)
    tally = run_suite(store, server, SQLITE_OPS, tmp_path)
    assert tally.kills >= 30
    assert tally.inside_transaction >= 10


def test_kills_postgres(pg_dsn: str, tmp_path: Path, server: KillServer) -> None:
    store = PostgresStore(pg_dsn)
    try:
        tally = run_suite(store, server, POSTGRES_OPS, tmp_path)
    finally:
        store.close()
    assert tally.kills >= 30
    assert tally.inside_transaction >= 10
