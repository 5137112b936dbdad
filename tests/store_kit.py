"""Prepared stores for the kill and fault suites: copies of one thread, and its rows.

A suite builds a thread shape once per store (`build`), copies it for each
case (`copy`: a SQLite file copied, a Postgres thread copied into a new
thread of the same database, an `InMemorySaver`'s dicts deep-copied) and
compares `Snapshot`s of the rows, read straight from the tables, never
through the library. The states a whole sequence of transactions can leave
(`stack_states`, `engine_after`) are what a fault or a kill may leave.
"""

from __future__ import annotations

import copy
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import memory_reclaim_records
from retaining_saver.testing.graphs import chat_graph, thread, turn

Row = tuple[Any, ...]
NEW = "<new-stamp>"  # the id of a stamp written during a case, once normalised

ENGINE_POLICY = RetentionPolicy(
    prune_leaf_sibling_branches=True,
    sibling_branch_min_age=timedelta(0),
    graft_duration_links=True,
)


@dataclass(frozen=True)
class Snapshot:
    """One thread's rows, without its thread id (so copies compare equal)."""

    checkpoints: frozenset[Row]  # (ns, id, parent id)
    writes: frozenset[Row]  # (ns, checkpoint id, task id, idx)
    blobs: frozenset[Row]  # (ns, channel, version); SQLite has none
    reclaimed: frozenset[Row]  # (ns, reclaimed id, clone id)

    @property
    def ids(self) -> set[str]:
        return {row[1] for row in self.checkpoints}

    def mentioned(self) -> set[str]:
        return self.ids | {r[1] for r in self.reclaimed} | {r[2] for r in self.reclaimed}

    def renamed(self, old: str, new: str) -> Snapshot:
        def swap(rows: frozenset[Row]) -> frozenset[Row]:
            return frozenset(tuple(new if v == old else v for v in row) for row in rows)

        return Snapshot(swap(self.checkpoints), swap(self.writes), self.blobs, swap(self.reclaimed))


def snap_diff(base: Snapshot, snap: Snapshot) -> str:
    """How `snap` differs from `base`, for assertion messages."""
    return (
        f"checkpoints gone {sorted(base.ids - snap.ids)}, new {sorted(snap.ids - base.ids)}; "
        f"writes gone {len(base.writes - snap.writes)}, blobs gone {len(base.blobs - snap.blobs)}"
        f"; records added {sorted(snap.reclaimed - base.reclaimed)}; rows changed "
        f"{sorted(snap.checkpoints - base.checkpoints)}"
    )


# Stores


class SqliteStore:
    """Templates are files in `directory`; a copy is a new file (WAL, as SqliteSaver sets)."""

    kind = "sqlite"

    def __init__(self, directory: Path, factory: type[sqlite3.Connection] = sqlite3.Connection):
        self.directory = directory
        self.factory = factory
        self.copies = 0
        self.shapes: dict[str, Shape] = {}

    def template(self, name: str) -> str:
        return str(self.directory / f"template-{name}.sqlite")

    @contextmanager
    def bare(self, target: str) -> Iterator[SqliteSaver]:
        conn = sqlite3.connect(target, check_same_thread=False, factory=self.factory)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        finally:
            conn.close()

    def build(self, name: str, shape: Any) -> Shape:
        with self.bare(self.template(name)) as saver:
            built: Shape = shape(saver, f"template-{name}")
        # The last connection closed: the WAL went into the file, which stays in WAL mode.
        self.shapes[name] = built
        return built

    def copy(self, name: str) -> tuple[str, str]:
        self.copies += 1
        target = str(self.directory / f"copy-{self.copies}.sqlite")
        shutil.copyfile(self.template(name), target)
        return target, f"template-{name}"

    def discard(self, target: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(target + suffix).unlink(missing_ok=True)

    def snapshot(self, target: str, thread_id: str) -> Snapshot:
        conn = sqlite3.connect(target)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            checkpoints = conn.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints "
                "WHERE thread_id = ?",
                (thread_id,),
            ).fetchall()
            writes = conn.execute(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx FROM writes WHERE thread_id = ?",
                (thread_id,),
            ).fetchall()
            reclaimed = []
            if conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'retaining_saver_reclaimed'"
            ).fetchall():
                reclaimed = conn.execute(
                    "SELECT checkpoint_ns, checkpoint_id, clone_id FROM retaining_saver_reclaimed "
                    "WHERE thread_id = ?",
                    (thread_id,),
                ).fetchall()
        finally:
            conn.close()
        return Snapshot(
            frozenset(checkpoints), frozenset(writes), frozenset(), frozenset(reclaimed)
        )


class PostgresStore:
    """Templates are threads `template-NAME`; a copy is a new thread of the same database.

    `bare` yields one `PostgresSaver` for every copy, on a connection of
    `connection_class` opened as `from_conn_string` opens it.
    """

    kind = "postgres"

    def __init__(self, dsn: str, connection_class: Any = None) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.copies = 0
        self.shapes: dict[str, Shape] = {}
        self._stack = ExitStack()
        cls = connection_class or psycopg.Connection
        saver_conn = cls.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.saver_conn = self._stack.enter_context(saver_conn)
        self._saver = PostgresSaver(self.saver_conn)
        self._saver.setup()
        self._columns = {
            table: [
                str(r[0])
                for r in self.conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name <> 'thread_id' ORDER BY ordinal_position",
                    (table,),
                )
            ]
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        }

    def close(self) -> None:
        self._stack.close()
        self.conn.close()

    @contextmanager
    def bare(self, target: str) -> Iterator[BaseCheckpointSaver[Any]]:
        yield self._saver

    def build(self, name: str, shape: Any) -> Shape:
        built: Shape = shape(self._saver, f"template-{name}")
        self.shapes[name] = built
        return built

    def copy(self, name: str) -> tuple[str, str]:
        """The template thread's rows, copied into a new thread of the same database."""
        from psycopg import sql

        self.copies += 1
        new = f"copy-{name}-{self.copies}"
        for table, columns in self._columns.items():
            names = sql.SQL(", ").join(map(sql.Identifier, columns))
            self.conn.execute(
                sql.SQL(
                    "INSERT INTO {table} (thread_id, {names}) "
                    "SELECT %s, {names} FROM {table} WHERE thread_id = %s"
                ).format(table=sql.Identifier(table), names=names),
                (new, f"template-{name}"),
            )
        return self.dsn, new

    def discard(self, target: str) -> None:
        pass

    def snapshot(self, target: str, thread_id: str) -> Snapshot:
        def rows(query: str) -> frozenset[Row]:
            return frozenset(tuple(r) for r in self.conn.execute(query, (thread_id,)))

        reclaimed: frozenset[Row] = frozenset()
        found = self.conn.execute("SELECT to_regclass('retaining_saver_reclaimed')").fetchone()
        if found is not None and found[0] is not None:
            reclaimed = rows(
                "SELECT checkpoint_ns, checkpoint_id, clone_id FROM retaining_saver_reclaimed "
                "WHERE thread_id = %s"
            )
        return Snapshot(
            rows(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints "
                "WHERE thread_id = %s"
            ),
            rows(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx FROM checkpoint_writes "
                "WHERE thread_id = %s"
            ),
            rows(
                "SELECT checkpoint_ns, channel, version FROM checkpoint_blobs WHERE thread_id = %s"
            ),
            reclaimed,
        )


class MemoryStore:
    """Templates are `InMemorySaver`s; a copy is a new saver with the dicts deep-copied.
    Reclaim records live beside the saver (read by `memory_reclaim_records`)."""

    kind = "memory"

    def __init__(self) -> None:
        self.templates: dict[str, InMemorySaver] = {}
        self.shapes: dict[str, Shape] = {}

    @contextmanager
    def bare(self, target: InMemorySaver) -> Iterator[InMemorySaver]:
        yield target

    def build(self, name: str, shape: Any) -> Shape:
        saver = self.templates[name] = InMemorySaver()
        built: Shape = shape(saver, f"template-{name}")
        self.shapes[name] = built
        return built

    def copy(self, name: str) -> tuple[InMemorySaver, str]:
        template, saver = self.templates[name], InMemorySaver()
        saver.storage = copy.deepcopy(template.storage)
        saver.writes = copy.deepcopy(template.writes)
        saver.blobs = copy.deepcopy(template.blobs)
        return saver, f"template-{name}"

    def discard(self, target: InMemorySaver) -> None:
        pass

    def snapshot(self, target: InMemorySaver, thread_id: str) -> Snapshot:
        checkpoints = {
            (ns, cid, row[2])
            for ns, rows in target.storage.get(thread_id, {}).items()
            for cid, row in rows.items()
        }
        writes = {
            (ns, cid, task_id, idx)
            for (t, ns, cid), rows in target.writes.items()
            if t == thread_id
            for task_id, idx in rows
        }
        blobs = {(ns, ch, v) for (t, ns, ch, v) in target.blobs if t == thread_id}
        reclaimed = memory_reclaim_records(target, thread_id)
        return Snapshot(frozenset(checkpoints), frozenset(writes), frozenset(blobs), reclaimed)


# Thread shapes, built with real graph runs on the bare saver


@dataclass(frozen=True)
class Shape:
    """A prepared thread: the stamps an admission deletes (newest first; `NEW` for one
    the case writes itself), its head's message count, and the engine's dry-run plan."""

    stack: tuple[str, ...]
    said: int
    turns: int
    planned: dict[str, Any] = field(default_factory=dict)


def head_values(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, Any]:
    values: dict[str, Any] = chat_graph(saver).get_state(thread(thread_id)).values
    return values


def admission_shape(saver: BaseCheckpointSaver[Any], thread_id: str) -> Shape:
    """Two turns, then two stacked stamps on the head (one admission deletes both)."""
    graph = chat_graph(saver)
    for i in range(2):
        graph.invoke(turn(i), thread(thread_id))
    first = write_duration_leaf(saver, thread_id, "r1", 1.0)
    second = write_duration_leaf(saver, thread_id, "r2", 2.0)
    assert first and second
    values = head_values(saver, thread_id)
    return Shape((second, first), len(values["said"]), values["turns"])


def stamp_shape(saver: BaseCheckpointSaver[Any], thread_id: str) -> Shape:
    """Two turns and one stamp; the case stamps again, through the wrapper."""
    graph = chat_graph(saver)
    for i in range(2):
        graph.invoke(turn(i), thread(thread_id))
    stamp = write_duration_leaf(saver, thread_id, "r1", 1.0)
    assert stamp
    values = head_values(saver, thread_id)
    return Shape((NEW, stamp), len(values["said"]), values["turns"])


def engine_shape(saver: BaseCheckpointSaver[Any], thread_id: str) -> Shape:
    """A duration link a later run forked from, a regenerate that supersedes a branch,
    and a trailing stamp: the engine's plan grafts, deletes a subtree and the stamp."""
    graph = chat_graph(saver)
    graph.invoke(turn(0), thread(thread_id))
    write_duration_leaf(saver, thread_id, "r0")
    graph.invoke(turn(1), thread(thread_id))
    head = saver.get_tuple(thread(thread_id))
    assert head is not None
    fork = str(head.checkpoint["id"])
    write_duration_leaf(saver, thread_id, "r1")
    graph.invoke(turn(2), thread(thread_id))
    graph.invoke(turn(3), thread(thread_id, fork))  # regenerate turn 2 from before it
    stamp = write_duration_leaf(saver, thread_id, "r3")
    assert stamp
    plan = RetainingSaver(saver, admission="off").enforce_thread_retention(
        thread_id, ENGINE_POLICY, dry_run=True
    )
    reasons = Counter(str(reason) for reason in plan.deleted.values())
    assert set(reasons) == {
        "trailing-duration-leaf",
        "superseded-branch",
        "grafted-duration-link",
    }, reasons
    assert len(plan.grafts) == 1
    values = head_values(saver, thread_id)
    planned = {
        "deleted": {cid for _, cid in plan.deleted},
        "grafts": {g.child_id: g.new_parent_id for g in plan.grafts},
        "clones": {cid: clone for (_, cid), clone in plan.clones.items()},
        "freed_blobs": set(plan.freed_blobs),
    }
    return Shape((stamp,), len(values["said"]), values["turns"], planned)


SHAPES = {"admission": admission_shape, "stamp": stamp_shape, "engine": engine_shape}


# What a fault or a kill may leave: a state reached by whole transactions


def engine_after(base: Snapshot, planned: dict[str, Any]) -> Snapshot:
    """`base` with the whole dry-run plan carried out."""
    deleted, grafts = planned["deleted"], planned["grafts"]
    return Snapshot(
        frozenset(
            (ns, cid, grafts.get(cid, parent))
            for ns, cid, parent in base.checkpoints
            if cid not in deleted
        ),
        frozenset(w for w in base.writes if w[1] not in deleted),
        frozenset(b for b in base.blobs if b not in planned["freed_blobs"]),
        base.reclaimed | {("", cid, clone) for cid, clone in planned["clones"].items()},
    )


def stack_states(base: Snapshot, shape: Shape, records: frozenset[Row]) -> dict[str, Snapshot]:
    """Base; [the case's own stamp written;] then each stamp of the stack deleted in
    turn, newest first, each with its reclaim record (`records`, as a clean run wrote them)."""
    states = {"nothing deleted": base}
    top = base
    if shape.stack[0] == NEW:
        top = replace(base, checkpoints=base.checkpoints | {("", NEW, max(base.ids))})
        states["new stamp written, kept"] = top
    for j in range(1, len(shape.stack) + 1):
        gone = set(shape.stack[:j])
        states[f"{j} of {len(shape.stack)} stamps deleted"] = replace(
            top,
            checkpoints=frozenset(r for r in top.checkpoints if r[1] not in gone),
            reclaimed=top.reclaimed | {r for r in records if r[1] in gone},
        )
    if shape.stack[0] == NEW:
        states.update(_taken_by_the_write(base, shape.stack[1:], records))
    return states


def _taken_by_the_write(
    base: Snapshot, old: Sequence[str], records: frozenset[Row]
) -> dict[str, Snapshot]:
    """A new stamp written through the wrapper first takes the stamps under it (newest
    first), then lands on the survivor, which admission may take it from in turn."""
    parent_of = {cid: parent for _, cid, parent in base.checkpoints}
    states: dict[str, Snapshot] = {}
    for k in range(1, len(old) + 1):
        gone = set(old[:k])
        taken = replace(
            base,
            checkpoints=frozenset(r for r in base.checkpoints if r[1] not in gone),
            reclaimed=base.reclaimed | {r for r in records if r[1] in gone},
        )
        states[f"{k} old stamp(s) taken by the write"] = taken
        landed = replace(taken, checkpoints=taken.checkpoints | {("", NEW, parent_of[old[k - 1]])})
        states[f"{k} old stamp(s) taken, the new one written"] = landed
        states[f"{k} old stamp(s) taken, the new one written and deleted"] = replace(
            taken, reclaimed=taken.reclaimed | {r for r in records if r[1] == NEW}
        )
    return states


def new_records(base: Snapshot, final: Snapshot) -> frozenset[Row]:
    """The reclaim records a clean run added, its own stamp's id renamed `NEW`."""
    added = final.reclaimed - base.reclaimed
    made_up = {r[1] for r in added} - base.ids
    assert len(made_up) <= 1, added
    return frozenset((ns, NEW if cid in made_up else cid, clone) for ns, cid, clone in added)


def normalised(snap: Snapshot, base: Snapshot) -> Snapshot:
    """`snap` with the one id the case made up (its stamp) renamed `NEW`."""
    made_up = snap.mentioned() - base.mentioned()
    assert len(made_up) <= 1, f"more than one new checkpoint: {made_up}"
    return snap.renamed(made_up.pop(), NEW) if made_up else snap


def matching(states: dict[str, Snapshot], snap: Snapshot) -> str | None:
    """The name of the state `snap` is, if any. Reclaim records are compared by where
    they lead: a stamp recorded as the clone of another reclaimed stamp resolves, as a
    read does, through that one's record (a write that could not take the stamp it
    landed on leaves such a chain; a clean run records the end of it)."""
    resolved = _resolved(snap)
    return next((n for n, state in states.items() if _resolved(state) == resolved), None)


def _resolved(snap: Snapshot) -> Snapshot:
    clone_of = {(ns, cid): clone for ns, cid, clone in snap.reclaimed}

    def end(ns: str, clone: str) -> str:
        for _ in range(8):
            if (ns, clone) not in clone_of:
                break
            clone = clone_of[(ns, clone)]
        return clone

    return replace(snap, reclaimed=frozenset((ns, c, end(ns, k)) for ns, c, k in snap.reclaimed))
