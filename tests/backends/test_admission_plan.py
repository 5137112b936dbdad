"""Postgres: the one-statement admission read costs the saver's read and one index probe
on any thread, whatever the statistics say: a head that is no leaf runs no scan of the
take (`_postgres_sql_admission`), and the statement is short enough for psycopg to
remember how it parsed it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from retaining_saver import RetainingSaver
from retaining_saver._rules import DURATION_MARKER
from retaining_saver.backends import _postgres_sql_admission
from retaining_saver.backends._postgres_admission import text_array
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config

READS = ("ADMIT_AND_READ_SQL", "ADMIT_EXPIRE_AND_READ_SQL")

# psycopg parses a query for its placeholders once and caches the result, only up to
# this length (`psycopg._queries.MAX_CACHED_STATEMENT_LENGTH`); a longer one is parsed
# again, in Python, on every execution.
PSYCOPG_CACHED_LENGTH = 4096


def plan_of(dsn: str, sql: str, thread_id: str) -> str:
    """What the admission read `sql` did on `thread_id`, executed: `EXPLAIN ANALYZE`."""
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "marker_source": DURATION_MARKER.source,
        "marker_keys": text_array(DURATION_MARKER.keys),
        "protected": text_array(()),
        "ttl_seconds": 3600.0,
        "taken_by": "plan-test",
    }
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        rows: list[Any] = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}", params).fetchall()
    return "\n".join(str(row["QUERY PLAN"]) for row in rows)


def scans_of_the_take(plan: str) -> list[str]:
    """The plan's lines that scan the checkpoint the take would delete (`c`)."""
    return [line for line in plan.splitlines() if "Scan" in line and " on checkpoints c " in line]


@pytest.mark.parametrize("name", READS)
def test_a_head_that_is_no_leaf_runs_no_scan_of_the_take(pg_dsn: str, name: str) -> None:
    with PostgresSaver.from_conn_string(pg_dsn) as inner:
        inner.setup()
        saver = RetainingSaver(inner)
        saver.create_retention_indexes()
        graph = build_chat_graph(saver)
        for turn in range(3):
            graph.invoke(chat_turn(turn), thread_config("a"))
    plan = plan_of(pg_dsn, getattr(_postgres_sql_admission, name), "a")
    scans = scans_of_the_take(plan)
    assert scans, plan
    assert all("(never executed)" in line for line in scans), plan
    assert "One-Time Filter" in plan, plan


def test_the_admission_read_is_short_enough_for_psycopg_to_cache() -> None:
    sql = _postgres_sql_admission.ADMIT_AND_READ_SQL
    assert len(sql) <= PSYCOPG_CACHED_LENGTH, len(sql)
    assert len(_postgres_sql_admission.SELECT_HEAD_ROW_SQL) <= PSYCOPG_CACHED_LENGTH


def test_psycopg_caches_up_to_that_length() -> None:
    from psycopg import _queries

    assert getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", None) == PSYCOPG_CACHED_LENGTH
