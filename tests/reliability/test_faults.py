"""Fault suite: every database call of a deletion fails in turn, and nothing is partial.

A `Faults` injector wraps the backend's statement executor (SQLite and
Postgres `_execute`, Postgres `_aexecute`, the in-memory backend's statement
closures) while one operation runs, and makes its N-th statement fail: before
it runs, or after it ran (a lost reply). Each statement of the operation is
failed once, on a fresh copy of the prepared thread (tests/store_kit.py).
Commits fail too (a SQLite connection whose `commit` raises instead of
committing; a Postgres connection whose transaction fails before its COMMIT,
or loses the COMMIT's reply), and so do history caches and `on_reclaim`.

The operations: a user's run (`graph.invoke` with `admission="auto"`, and
`ainvoke` as the async variant) on a thread whose head is two stacked stamps;
on Postgres a run after a stamp the same wrapper wrote (the one-statement
take); an explicit `admit`; and an engine pass that grafts, prunes a branch
and deletes a stamp in one transaction.

After each: the run succeeded with the expected messages; the store is a
state whole transactions reach (each stamp deleted together with its reclaim
record, or kept without one; the engine's plan whole or not at all);
integrity is clean; and `counters`, `on_reclaim`, the `AdmissionResult` and
the engine's report say exactly what the store shows was deleted.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from conftest import create_database, drop_database
from savers import KINDS, open_async_at
from store_kit import (
    ENGINE_POLICY,
    NEW,
    SHAPES,
    MemoryStore,
    PostgresStore,
    Shape,
    Snapshot,
    SqliteStore,
    engine_after,
    matching,
    new_records,
    snap_diff,
    stack_states,
)

import retaining_saver.backends.postgres as pg_backend
import retaining_saver.backends.sqlite as sqlite_backend
from retaining_saver import RetainingSaver
from retaining_saver.backends import memory as memory_backend
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn

WHEN = ("before", "after")


def _error(kind: str, what: str) -> Exception:
    message = f"injected fault: {what}"
    if kind == "sqlite":
        return sqlite3.OperationalError(message)
    if kind == "postgres":
        return psycopg.OperationalError(message)
    return RuntimeError(message)


class Faults:
    """Counts the backend's statements while armed, and fails the chosen one.

    `at`/`when`: fail statement `at` (1-based) before it runs or after it ran.
    `commit_at`/`commit_when`: fail the `commit_at`-th commit of a deleting
    transaction (SQLite: after `BEGIN IMMEDIATE`; Postgres: a
    `connection.transaction()` block) before it commits, or after.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.armed = False
        self.at: int | None = None
        self.when = "before"
        self.commit_at: int | None = None
        self.commit_when = "before"
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.commits = 0
        self.labels: list[str] = []
        self.fired: str | None = None
        self.deleting = False

    @contextmanager
    def arm(self) -> Iterator[None]:
        self.reset()
        self.armed = True
        try:
            yield
        finally:
            self.armed = False

    def _fire(self, what: str) -> None:
        self.fired = what
        raise _error(self.kind, what)

    def before(self, label: str) -> int:
        if not self.armed:
            return 0
        self.count += 1
        self.labels.append(label)
        if label.startswith("BEGIN IMMEDIATE"):
            self.deleting = True
        if self.count == self.at and self.when == "before":
            self._fire(f"before statement #{self.count} {label}")
        return self.count

    def after(self, index: int) -> None:
        if index and index == self.at and self.when == "after":
            self._fire(f"after statement #{index} {self.labels[index - 1]}")

    def commit(self, commit: Callable[[], None]) -> None:
        """A deleting transaction's commit (SQLite)."""
        deleting, self.deleting = self.deleting, False
        if not (self.armed and deleting):
            commit()
            return
        self.commits += 1
        if self.commits == self.commit_at and self.commit_when == "before":
            self._fire(f"commit #{self.commits} fails, nothing committed")
        commit()
        if self.commits == self.commit_at and self.commit_when == "after":
            self._fire(f"commit #{self.commits} committed, its reply lost")


def _label(statement: Any) -> str:
    if callable(statement):  # the in-memory backend's statements are closures
        return str(statement.__qualname__).split(".")[1]
    return " ".join(str(statement.sql).split())[:60]


class FlakySqlite(sqlite3.Connection):
    """A real sqlite3 connection whose commit can fail on cue."""

    faults: Faults | None = None

    def commit(self) -> None:
        if FlakySqlite.faults is None:
            super().commit()
        else:
            FlakySqlite.faults.commit(super().commit)


class FlakyPostgres(psycopg.Connection[Any]):
    """A real psycopg connection whose transaction blocks can fail at their COMMIT."""

    faults: Faults | None = None

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        faults = FlakyPostgres.faults
        armed = faults is not None and faults.armed
        with super().transaction(*args, **kwargs) as tx:
            yield tx
            if armed:
                assert faults is not None
                faults.commits += 1
                if faults.commits == faults.commit_at and faults.commit_when == "before":
                    faults._fire(f"commit #{faults.commits} fails, rolled back")
        if armed:
            assert faults is not None
            if faults.commits == faults.commit_at and faults.commit_when == "after":
                faults._fire(f"commit #{faults.commits} committed, its reply lost")


def install(kind: str, faults: Faults, monkeypatch: pytest.MonkeyPatch) -> None:
    """Route every backend statement of `kind` through `faults`."""
    if kind == "sqlite":
        execute = sqlite_backend._execute

        def sqlite_execute(conn: Any, statement: Any) -> Any:
            index = faults.before(_label(statement))
            rows = execute(conn, statement)
            faults.after(index)
            return rows

        monkeypatch.setattr(sqlite_backend, "_execute", sqlite_execute)
        monkeypatch.setattr(FlakySqlite, "faults", faults)
    elif kind == "postgres":
        pg_execute, pg_aexecute = pg_backend._execute, pg_backend._aexecute

        def postgres_execute(cur: Any, statement: Any) -> Any:
            index = faults.before(_label(statement))
            rows = pg_execute(cur, statement)
            faults.after(index)
            return rows

        async def postgres_aexecute(cur: Any, statement: Any) -> Any:
            index = faults.before(_label(statement))
            rows = await pg_aexecute(cur, statement)
            faults.after(index)
            return rows

        monkeypatch.setattr(pg_backend, "_execute", postgres_execute)
        monkeypatch.setattr(pg_backend, "_aexecute", postgres_aexecute)
        monkeypatch.setattr(FlakyPostgres, "faults", faults)
    else:
        memory_execute = memory_backend._execute

        def faulty(statement: Any) -> Any:
            # The backend's own transaction (with its undo) runs the statements; each one
            # passes through the fault plan first.
            index = faults.before(_label(statement))
            result = memory_execute(statement)
            faults.after(index)
            return result

        monkeypatch.setattr(memory_backend, "_execute", faulty)


# Stores, built once per module


@pytest.fixture(scope="module")
def stores(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    try:
        yield _LazyStores(made, request, tmp_path_factory)
    finally:
        if "postgres" in made:
            made["postgres"].close()
            drop_database(made["postgres-server"], made["postgres"].dsn)


class _LazyStores(dict[str, Any]):
    """Each kind's store, made (and its shapes built) on first use."""

    def __init__(self, made: dict[str, Any], request: pytest.FixtureRequest, factory: Any) -> None:
        super().__init__()
        self.made, self.request, self.factory = made, request, factory

    def __missing__(self, kind: str) -> Any:
        if kind == "sqlite":
            store: Any = SqliteStore(self.factory.mktemp("faults"), factory=FlakySqlite)
        elif kind == "postgres":
            server = self.request.getfixturevalue("pg_server")
            self.made["postgres-server"] = server
            store = PostgresStore(create_database(server), connection_class=FlakyPostgres)
        else:
            store = MemoryStore()
        self.made[kind] = store
        for name, shape in SHAPES.items():
            store.build(name, shape)
        self[kind] = store
        return store


# One operation, and what it left


@dataclass
class Outcome:
    values: dict[str, Any] | None = None
    result: Any = None  # AdmissionResult (admit) or RetentionReport (engine)
    raised: BaseException | None = None
    counters: Any = None
    events: list[str] = field(default_factory=list)
    stamp_id: str | None = None  # the stamp a `stamp-run` wrote


PATHS = {
    "run": "admission",
    "arun": "admission",
    "stamp-run": "stamp",
    "admit": "admission",
    "engine": "engine",
}


def run_async(store: Any, target: Any, body: Callable[[Any], Any]) -> Any:
    """`await body(saver)` over the async twin of the store's saver, in a new event loop."""

    async def with_saver() -> Any:
        if store.kind == "memory":
            return await body(target)
        async with open_async_at(store.kind, target) as saver:
            return await body(saver)

    return asyncio.run(with_saver())


def operate(
    store: Any,
    path: str,
    target: Any,
    thread_id: str,
    faults: Faults,
    caches: Sequence[Any] = (),
    on_reclaim_raises: bool = False,
) -> Outcome:
    """Carry out `path` on the copy with `faults` armed; what it answered and counted."""
    out = Outcome()
    config = thread(thread_id)

    def wrapper(inner: Any, **flags: Any) -> RetainingSaver:
        def note(event: Any) -> None:
            out.events.append(event.checkpoint_id)
            if on_reclaim_raises:
                raise RuntimeError("injected fault: on_reclaim")

        return RetainingSaver(inner, on_reclaim=note, history_caches=caches, **flags)

    if path == "arun":

        async def body(inner: Any) -> None:
            saver = wrapper(inner)
            with faults.arm():
                try:
                    out.values = await chat_graph(saver).ainvoke(turn(100), config)
                except Exception as error:
                    out.raised = error
            out.counters = saver.counters

        run_async(store, target, body)
        return out
    with store.bare(target) as bare:
        saver = wrapper(bare, admission="off" if path == "engine" else "auto")
        with faults.arm():
            try:
                if path == "engine":
                    out.result = saver.enforce_thread_retention(thread_id, ENGINE_POLICY)
                elif path == "admit":
                    out.result = saver.admit(thread_id)
                else:
                    if path == "stamp-run":
                        out.stamp_id = write_duration_leaf(saver, thread_id, "case", 9.0)
                    out.values = chat_graph(saver).invoke(turn(100), config)
            except Exception as error:
                out.raised = error
        out.counters = saver.counters
    return out


def check(
    store: Any,
    path: str,
    shape: Shape,
    target: Any,
    thread_id: str,
    base: Snapshot,
    states: dict[str, Snapshot],
    out: Outcome,
) -> tuple[list[str], str | None]:
    """What is wrong with the store and the outcome; and which state the store is in."""
    wrong: list[str] = []
    snap = projected(store.snapshot(target, thread_id), base, out.stamp_id)
    state = matching(states, snap)
    if state is None:
        wrong.append(f"partial: the store is in no whole state: {snap_diff(base, snap)}")
    with store.bare(target) as bare:
        found = integrity(bare, thread_id)
        if not found.clean:
            wrong.append(f"integrity {found}")
        if path == "engine":
            wrong += _engine_claims(out, base, snap)
        else:
            wrong += _admission_claims(path, shape, out, snap, bare, thread_id)
        # Whatever happened, the thread goes on through the wrapper.
        after = chat_graph(RetainingSaver(bare)).invoke(turn(300), thread(thread_id))
        if len(after["said"]) != shape.said + 2 + (2 if out.values is not None else 0):
            wrong.append(f"a later run found {len(after['said'])} messages")
        if not integrity(bare, thread_id).clean:
            wrong.append("integrity broken after a later run")
    return wrong, state


def projected(snap: Snapshot, base: Snapshot, stamp_id: str | None) -> Snapshot:
    """`snap` without what the run wrote after its admission: the rows of the prepared
    thread (and the case's own stamp, renamed `NEW`), and every reclaim record."""
    keep = base.ids | {stamp_id} if stamp_id else base.ids
    only = Snapshot(
        frozenset(r for r in snap.checkpoints if r[1] in keep),
        frozenset(r for r in snap.writes if r[1] in keep),
        snap.blobs & base.blobs,
        snap.reclaimed,
    )
    return only.renamed(stamp_id, NEW) if stamp_id else only


def _engine_claims(out: Outcome, base: Snapshot, snap: Snapshot) -> list[str]:
    gone = base.ids - snap.ids
    if out.raised is not None:
        return []  # an error is no claim; the store must only be whole (checked above)
    claimed = {cid for _, cid in out.result.deleted}
    if claimed != gone:
        return [f"the report says {len(claimed)} deleted, the store lost {len(gone)}"]
    return []


def _admission_claims(
    path: str,
    shape: Shape,
    out: Outcome,
    snap: Snapshot,
    bare: Any,
    thread_id: str,
) -> list[str]:
    wrong = []
    stack = list(shape.stack)
    if stack[0] == NEW and NEW not in snap.mentioned():
        stack = stack[1:]  # the stamp itself was never written
    gone = [cid for cid in stack if cid not in snap.ids]
    if out.raised is not None:
        wrong.append(f"the user's call raised {out.raised!r}")
    if path != "admit" and out.values is not None and len(out.values["said"]) != shape.said + 2:
        wrong.append(f"the run answered {len(out.values['said'])} messages")
    counters = out.counters
    if counters is not None and counters.reclaimed != len(gone):
        wrong.append(
            f"counters.reclaimed={counters.reclaimed}, but the store lost {len(gone)} stamp(s)"
        )
    if len(out.events) != len(gone):
        wrong.append(f"on_reclaim was called for {len(out.events)}, {len(gone)} were deleted")
    if (
        counters is not None
        and len(gone) < len(stack)
        and counters.failed + sum(counters.skipped.values()) == 0
    ):
        wrong.append("a stamp was kept, but nothing says why")
    if path == "admit" and out.result is not None:
        result = out.result
        if len(result.reclaimed) != len(gone):
            wrong.append(f"AdmissionResult.reclaimed={result.reclaimed}, the store lost {gone}")
        head = bare.get_tuple(thread(thread_id))
        if head is not None and result.head_id != head.checkpoint["id"]:
            wrong.append(f"AdmissionResult.head_id={result.head_id} is not the head")
        if len(gone) < len(stack) and result.skipped is None:
            wrong.append("AdmissionResult kept a stamp and names no reason")
    return wrong


def faults_of(
    store: Any,
    path: str,
    faults: Faults,
    cases: Sequence[dict[str, Any]],
    records: Any,
    **options: Any,
) -> tuple[int, Counter[str], list[str]]:
    """Run `path` once per case (settings of `faults`) on a fresh copy, and check each.
    `records`: the reclaim records a clean run wrote; `options` go to `operate`."""
    shape: Shape = store.shapes[PATHS[path]]
    tried, seen, violations = 0, Counter[str](), []
    for case in cases:
        for key, value in {"at": None, "commit_at": None, **case}.items():
            setattr(faults, key, value)
        target, thread_id = store.copy(PATHS[path])
        base = store.snapshot(target, thread_id)
        out = operate(store, path, target, thread_id, faults, **options)
        if path == "engine":
            states = {"plan not carried out": base, "whole plan": engine_after(base, shape.planned)}
        else:
            states = stack_states(base, shape, records)
        label = f"{store.kind} {path} {faults.fired or f'(no fault fired: {case})'}"
        wrong, state = check(store, path, shape, target, thread_id, base, states, out)
        violations += [f"{label}: {w}" for w in wrong]
        seen[f"{state}{' (raised)' if out.raised else ''}"] += 1
        tried += faults.fired is not None
        store.discard(target)
    return tried, seen, violations


def clean_run(store: Any, path: str, faults: Faults) -> tuple[list[str], frozenset[Any]]:
    """One run with no fault: its statements (labels) and the reclaim records it wrote;
    `faults.commits` is left at the number of deleting transactions it committed."""
    faults.at = faults.commit_at = None
    shape: Shape = store.shapes[PATHS[path]]
    target, thread_id = store.copy(PATHS[path])
    base = store.snapshot(target, thread_id)
    out = operate(store, path, target, thread_id, faults)
    assert out.raised is None, out.raised
    labels = list(faults.labels)
    final = store.snapshot(target, thread_id)
    store.discard(target)
    if path == "engine":
        assert final == engine_after(base, shape.planned), snap_diff(base, final)
        return labels, frozenset()
    records = new_records(base, final)
    assert {r[1] for r in records} == set(shape.stack), (records, shape.stack)
    assert out.counters.reclaimed == len(shape.stack), out.counters
    return labels, records


def _paths(kind: str) -> list[str]:
    paths = ["run", "arun", "admit", "engine"]
    return [*paths, "stamp-run"] if kind == "postgres" else paths


# An in-memory statement is a closure over dicts: it can raise (a serializer's decode
# error, MemoryError) but there is no reply to lose, so memory is failed before only.
STATEMENT_CASES = [
    (k, p, w) for k in KINDS for p in _paths(k) for w in WHEN if k != "memory" or w == "before"
]


@pytest.mark.parametrize(("kind", "path", "when"), STATEMENT_CASES)
def test_every_statement_fails_in_turn(
    kind: str, path: str, when: str, stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[kind]
    faults = Faults(kind)
    install(kind, faults, monkeypatch)
    labels, records = clean_run(store, path, faults)
    assert labels, f"{path} ran no statement"
    cases = [{"at": i, "when": when} for i in range(1, len(labels) + 1)]
    tried, seen, violations = faults_of(store, path, faults, cases, records)
    print(f"\n{kind} {path} {when}: {tried} faults over {len(labels)} statements; {dict(seen)}")
    assert tried == len(labels)
    assert not violations, f"{len(violations)} violation(s):\n" + "\n".join(violations)


# Commits


COMMIT_CASES = [
    *[("sqlite", path, "before") for path in ("run", "admit", "engine")],
    # A Postgres admission takes in autocommit statements (their lost replies are above);
    # the engine's plan is one transaction block, whose COMMIT fails or loses its reply.
    *[("postgres", "engine", when) for when in WHEN],
]


@pytest.mark.parametrize(("kind", "path", "when"), COMMIT_CASES)
def test_every_commit_fails_in_turn(
    kind: str, path: str, when: str, stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[kind]
    faults = Faults(kind)
    install(kind, faults, monkeypatch)
    _, records = clean_run(store, path, faults)
    commits = faults.commits
    assert commits >= 1, f"{path} committed no deleting transaction"
    cases = [{"commit_at": n, "commit_when": when} for n in range(1, commits + 1)]
    tried, seen, violations = faults_of(store, path, faults, cases, records)
    print(f"\n{kind} {path} commit {when}: {tried} faults over {commits} commits; {dict(seen)}")
    assert tried == commits
    assert not violations, f"{len(violations)} violation(s):\n" + "\n".join(violations)


# History caches and on_reclaim


class BrokenCache:
    """A history cache whose `invalidate` (and `ainvalidate`) raises on the given calls."""

    def __init__(self, fail_on: set[int] | None) -> None:
        self.fail_on = fail_on  # None: every call
        self.calls = 0

    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        self.calls += 1
        if self.fail_on is None or self.calls in self.fail_on:
            raise ConnectionError(f"injected fault: cache call #{self.calls}")

    async def ainvalidate(
        self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]
    ) -> None:
        self.invalidate(thread_id, checkpoint_ns, checkpoint_ids)

    def purge(self, thread_id: str | None) -> None:
        self.invalidate(str(thread_id), "", ())

    async def apurge(self, thread_id: str | None) -> None:
        self.purge(thread_id)


# Two stamps: a cache is asked before and after each take (calls 1-4).
CACHE_FAILURES = {"1st": {1}, "2nd": {2}, "3rd": {3}, "4th": {4}, "every": None}
CACHE_PATHS = ("run", "arun", "admit", "engine")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", CACHE_PATHS)
def test_a_failing_history_cache(
    kind: str, path: str, stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[kind]
    faults = Faults(kind)
    install(kind, faults, monkeypatch)
    _, records = clean_run(store, path, faults)
    violations: list[str] = []
    deleted: dict[str, str] = {}
    for name, fail_on in CACHE_FAILURES.items():
        cache = BrokenCache(fail_on)
        _, seen, wrong = faults_of(store, path, faults, [{}], records, caches=[cache])
        violations += [f"cache fails on its {name} call: {w}" for w in wrong]
        deleted[name] = next(iter(seen))
        if cache.calls == 0:
            violations.append(f"cache fails on its {name} call: it was never called")
    print(f"\n{kind} {path}, cache failing on: {deleted}")
    assert not violations, f"{len(violations)} violation(s):\n" + "\n".join(violations)
    if path == "engine":
        # The engine asks the cache once, before it deletes, and deletes nothing if that fails.
        raised = "plan not carried out (raised)"
        assert deleted["1st"] == deleted["every"] == raised, deleted
        assert deleted["2nd"] == deleted["3rd"] == deleted["4th"] == "whole plan", deleted
    else:
        # Before the first take: nothing; after a take: logged, the take stands.
        assert deleted["1st"] == deleted["every"] == "nothing deleted", deleted
        assert deleted["3rd"] == "1 of 2 stamps deleted", deleted
        assert deleted["2nd"] == deleted["4th"] == "2 of 2 stamps deleted", deleted


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", ("run", "arun", "admit"))
def test_on_reclaim_raising(
    kind: str, path: str, stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[kind]
    faults = Faults(kind)
    install(kind, faults, monkeypatch)
    _, records = clean_run(store, path, faults)
    _, seen, violations = faults_of(store, path, faults, [{}], records, on_reclaim_raises=True)
    assert not violations, "\n".join(violations)
    assert dict(seen) == {"2 of 2 stamps deleted": 1}, seen
