"""A store that refuses deletions: cleanup says so once, backs off, and never fails a run.

Postgres: a role with SELECT, INSERT and UPDATE but no DELETE. SQLite: a
read-only connection. The engine raises `CleanupPermissionError` naming the
problem; nothing is partly deleted either way.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from savers import open_sync
from spies import Recorder

from retaining_saver import CleanupPermissionError, RetainingSaver, Skip
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config


@pytest.fixture
def no_delete_dsn(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """`pg_dsn` as a role that may read, insert and update, but not delete."""
    role = f"retaining_no_delete_{uuid.uuid4().hex[:8]}"
    with open_sync("postgres", request) as owner:
        RetainingSaver(owner).create_retention_indexes()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO "{role}"')
    yield make_conninfo(**{**conninfo_to_dict(pg_dsn), "user": role})
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')


def _turn_with_stamp(saver: Any, i: int) -> None:
    build_chat_graph(saver).invoke(chat_turn(i), thread_config("p"))
    write_duration_leaf(saver, "p")


def _denials(caplog: pytest.LogCaptureFixture) -> int:
    return sum("lack of permission" in r.getMessage() for r in caplog.records)


def test_postgres_without_delete_runs_on_says_so_once_and_backs_off(
    no_delete_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with PostgresSaver.from_conn_string(no_delete_dsn) as inner:
        saver = RetainingSaver(inner)
        takes = Recorder(saver._backend, ["reclaim_leaf", "admit_and_read"])
        with caplog.at_level(logging.DEBUG, logger="retaining_saver"):
            for i in range(3):
                _turn_with_stamp(saver, i)
        assert len(takes.calls) == 1, "after the refusal, cleanup waits instead of retrying"
        state = build_chat_graph(saver).get_state(thread_config("p"))
        assert [m.content for m in state.values["messages"]][-1] == "echo: user says 2"
        assert integrity(saver, "p").clean
        counters = saver.counters
        with pytest.raises(CleanupPermissionError, match="permission denied"):
            saver.enforce_thread_retention("p")
        assert integrity(saver, "p").clean
    logged = [r for r in caplog.records if "lack of permission" in r.getMessage()]
    assert [r.levelname for r in logged] == ["ERROR"]
    assert counters.failed == 0
    assert counters.reclaimed == 0
    # The first admission read is refused (its statement may delete, leaf or not); the
    # two after it back off.
    assert counters.skipped.get("permission-denied", 0) == 3


def test_sqlite_read_only_connection_backs_off_and_the_engine_names_it(
    sqlite_path: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    with open_sync("sqlite", request) as writer:
        _turn_with_stamp(writer, 0)
    ro = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True, check_same_thread=False)
    try:
        inner = SqliteSaver(ro)
        inner.is_setup = True  # setup() itself writes
        saver = RetainingSaver(inner, admission="explicit")
        with caplog.at_level(logging.DEBUG, logger="retaining_saver"):
            first, second = saver.admit("p"), saver.admit("p")
        with pytest.raises(CleanupPermissionError, match="readonly"):
            saver.enforce_thread_retention("p")
        report = saver.enforce_thread_retention("p", dry_run=True)  # a read: allowed
    finally:
        ro.close()
    assert (first.skipped, second.skipped) == (Skip.PERMISSION_DENIED,) * 2
    assert first.head_id is not None
    assert _denials(caplog) == 1
    assert len(report.deleted) == 1
