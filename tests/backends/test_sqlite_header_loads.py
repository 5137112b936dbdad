"""A SQLite lineage load that knows every row of the window reads their headers alone.

`_sqlite_lineage` first reads the window's headers (`SELECT_LINEAGE_HEADERS_SQL`:
type, lengths, parent, write count). When every row is one it remembers or wrote, by
the match `SELECT_LINEAGE_SQL` makes, that is the whole load; else that statement
reads the window. Either way the lineage is the one a backend that knows nothing reads.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.sqlite import SqliteSaver
from sqlite_rows_kit import EVERY_RUN_KEPT, Decodes, chat

from retaining_saver import RetainingSaver
from retaining_saver._rules import Lineage
from retaining_saver._transact import run
from retaining_saver.backends import _sqlite_lineage
from retaining_saver.backends._base import Mode
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sqlite_sql import SELECT_LINEAGE_HEADERS_SQL, SELECT_LINEAGE_SQL
from retaining_saver.backends.sqlite import SqliteBackend
from retaining_saver.testing.graphs import chat_graph, thread, turn

HEADERS, WHOLE = "headers", "whole"
_NAMES = {SELECT_LINEAGE_HEADERS_SQL: HEADERS, SELECT_LINEAGE_SQL: WHOLE}


@pytest.fixture
def saver(sqlite_conn: sqlite3.Connection) -> SqliteSaver:
    saved = SqliteSaver(sqlite_conn)
    saved.setup()
    return saved


def _load(backend: SqliteBackend, thread_id: str = "t") -> tuple[Lineage, list[str]]:
    """The lineage a load gives, and the statements it ran, by name."""
    ran: list[str] = []

    def recorded(op: Generator[Statement, Any, Lineage]) -> Generator[Statement, Any, Lineage]:
        answer = None
        try:
            while True:
                statement = op.send(answer)
                ran.append(_NAMES.get(statement.sql, statement.sql))
                answer = yield statement
        except StopIteration as done:
            return done.value

    lineage = run(backend, recorded(backend.load_lineage(thread_id)), Mode.READ)
    return lineage, ran


def _fresh(saver: SqliteSaver, thread_id: str = "t") -> Lineage:
    return _load(SqliteBackend(saver), thread_id)[0]


def test_a_load_that_knows_every_row_reads_only_the_headers(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat(saver, 3)
    backend = SqliteBackend(saver)
    first, ran = _load(backend)
    assert ran == [WHOLE]  # it knew nothing: no headers read for nothing
    remembered = dict(backend.remembered.get("t") or {})
    decodes = Decodes(backend, monkeypatch)
    second, ran = _load(backend)
    assert ran == [HEADERS] and decodes.count == 0
    assert second == first == _fresh(saver)
    again = backend.remembered.get("t") or {}
    assert all(again[key] is record for key, record in remembered.items())  # not remade


def test_a_row_it_does_not_know_makes_it_read_the_window(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = chat_graph(saver)
    graph.invoke(turn(0), thread("t"))
    backend = SqliteBackend(saver)
    _load(backend)
    graph.invoke(turn(1), thread("t"))  # four rows no load has read
    decodes = Decodes(backend, monkeypatch)
    loaded, ran = _load(backend)
    assert ran == [HEADERS, WHOLE]
    assert decodes.count == 4
    assert loaded == _fresh(saver)
    assert _load(backend)[1] == [HEADERS]


def test_what_the_wrapper_wrote_is_loaded_from_the_headers(
    sqlite_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SqliteSaver.from_conn_string(sqlite_path) as inner:
        wrapper = RetainingSaver(inner, retention=EVERY_RUN_KEPT)
        chat(wrapper, 3)
        backend = wrapper._backend
        assert isinstance(backend, SqliteBackend)
        assert backend.written.get("t")  # the last run's rows, never read
        decodes = Decodes(backend, monkeypatch)
        loaded, ran = _load(backend)
        assert ran == [HEADERS] and decodes.count == 0
        assert loaded == _fresh(inner)


@pytest.mark.parametrize("field", ["type", "payload", "metadata"])
def test_a_remembered_row_whose_header_differs_is_read(
    saver: SqliteSaver, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """Each of what a remembered row is told apart by (its type, its payload's and its
    metadata's lengths), changed in what is remembered, sends the load to the whole
    statement, which reads that row."""
    chat_graph(saver).invoke(turn(0), thread("t"))
    backend = SqliteBackend(saver)
    _load(backend)
    rows = backend.remembered.get("t")
    assert rows is not None
    key = max(rows, key=lambda k: k[1])
    validators = _tweaked(rows[key].validators, field, as_put=False)
    rows.add(key, _sqlite_lineage.Remembered(rows[key].node, validators))
    decodes = Decodes(backend, monkeypatch)
    loaded, ran = _load(backend)
    assert ran == [HEADERS, WHOLE] and decodes.count == 1
    assert loaded == _fresh(saver)


def _whole_rows(saver: SqliteSaver) -> list[sqlite3.Row]:
    """The thread's rows as `SELECT_LINEAGE_SQL` reads them when it knows none."""
    saver.conn.row_factory = sqlite3.Row
    params = {"thread_id": "t", "newest": None, "known": "[]", "written": "[]"}
    return saver.conn.execute(SELECT_LINEAGE_SQL, params).fetchall()


_TWEAKS = st.lists(
    st.sampled_from(["none", "type", "payload", "metadata", "absent"]), min_size=4, max_size=4
)


@settings(max_examples=60, deadline=None)
@given(known_tweaks=_TWEAKS, written_tweaks=_TWEAKS)
def test_the_headers_match_is_the_statements_match(
    known_tweaks: list[str], written_tweaks: list[str]
) -> None:
    """`_known_base` knows a row exactly where `SELECT_LINEAGE_SQL` answers it
    `remembered` or `written`, whatever is remembered or written of it."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        chat_graph(saver).invoke(turn(0), thread("t"))
        _match_as_the_statement(saver, known_tweaks, written_tweaks)
    finally:
        conn.close()


def _match_as_the_statement(
    saver: SqliteSaver, known_tweaks: list[str], written_tweaks: list[str]
) -> None:
    rows = _whole_rows(saver)
    known: dict[Any, _sqlite_lineage.Remembered] = {}
    written: dict[Any, _sqlite_lineage.Remembered] = {}
    node = SqliteBackend(saver)._node(rows[0], 0)
    for row, known_tweak, written_tweak in zip(rows, known_tweaks, written_tweaks, strict=True):
        key = (row["checkpoint_ns"], row["checkpoint_id"])
        exact = (row["type"], row["payload_length"], row["metadata_length"])
        for tweak, into, as_put in ((known_tweak, known, False), (written_tweak, written, True)):
            if tweak != "absent":
                into[key] = _sqlite_lineage.Remembered(node, _tweaked(exact, tweak, as_put))
    params = {
        "thread_id": "t",
        "newest": None,
        "known": json.dumps([[*k, *r.validators] for k, r in known.items()]),
        "written": json.dumps([[*k, r.validators[0], r.validators[2]] for k, r in written.items()]),
    }
    for row in saver.conn.execute(SELECT_LINEAGE_SQL, params):
        by_statement = bool(row["remembered"]) or bool(row["written"])
        assert (_sqlite_lineage._known_base(row, known, written) is not None) == by_statement


def _tweaked(exact: tuple[str, int, int], tweak: str, as_put: bool) -> tuple[str, int, int]:
    type_, payload, metadata = exact
    if as_put:
        payload = 0  # a put does not know its payload's length
    changed = {
        "none": (type_, payload, metadata),
        "type": (f"{type_}x", payload, metadata),
        "payload": (type_, payload + 1, metadata),
        "metadata": (type_, payload, metadata + 1),
    }
    return changed[tweak]


def test_a_node_changed_since_keeps_being_a_new_record(saver: SqliteSaver) -> None:
    """A known row whose parent moved gets a new node and a new record; the others keep
    theirs."""
    chat(saver, 2)
    backend = SqliteBackend(saver)
    first, _ = _load(backend)
    before = dict(backend.remembered.get("t") or {})
    head = max(first.nodes, key=lambda k: k[1])
    oldest = min(first.nodes, key=lambda k: k[1])
    saver.conn.execute(
        "UPDATE checkpoints SET parent_checkpoint_id = ? WHERE thread_id = 't'"
        " AND checkpoint_ns = ? AND checkpoint_id = ?",
        (oldest[1], *head),
    )
    saver.conn.commit()
    second, ran = _load(backend)
    assert ran == [HEADERS]
    assert second == _fresh(saver)
    assert second.nodes[head] == dataclasses.replace(first.nodes[head], parent_id=oldest[1])
    after = backend.remembered.get("t") or {}
    assert after[head] is not before[head]
    assert all(after[k] is before[k] for k in before if k != head)
