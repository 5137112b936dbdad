"""Postgres: `delete_for_runs` finds a run's threads through the run index that
`create_retention_indexes()` builds, not by reading every checkpoint's metadata."""

from __future__ import annotations

from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from retaining_saver import RetainingSaver
from retaining_saver.backends._postgres_sql import SELECT_RUN_THREADS_SQL
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config

RUN_INDEX = "retaining_saver_checkpoints_run_idx"


def plan_of(dsn: str, run_ids: list[str]) -> str:
    """The plan Postgres picks for the run lookup, sequential scans priced out as far as
    it can (a small table would otherwise be read whole, index or not)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET enable_seqscan = off")
        rows: list[Any] = conn.execute(f"EXPLAIN {SELECT_RUN_THREADS_SQL}", (run_ids,)).fetchall()
    return "\n".join(str(row["QUERY PLAN"]) for row in rows)


def test_the_run_lookup_probes_the_run_index(pg_dsn: str) -> None:
    with PostgresSaver.from_conn_string(pg_dsn) as inner:
        inner.setup()
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        for t in range(3):
            for i in range(2):
                config: Any = thread_config(f"t{t}")
                config["configurable"]["run_id"] = f"run-{t}-{i}"
                graph.invoke(chat_turn(i), config)
        before = plan_of(pg_dsn, ["run-1-1"])  # every row read, its metadata filtered
        assert RUN_INDEX not in before and "Filter: ((metadata ->> 'run_id'" in before
        saver.create_retention_indexes()
        after = plan_of(pg_dsn, ["run-1-1"])  # the run id is the index's condition
        assert RUN_INDEX in after and "Index Cond: ((metadata ->> 'run_id'" in after, after
        assert "Filter" not in after, after
        saver.delete_for_runs(["run-1-1"])
        runs = {t.metadata.get("run_id") for t in inner.list(thread_config("t1"))}
        assert runs == {"run-1-0"}
