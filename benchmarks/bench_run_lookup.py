"""Postgres: how `delete_for_runs` finds a run's threads, with and without the run index.

    python benchmarks/bench_run_lookup.py [--threads 20000] [--turns 5] [--rounds 200]

A template database holds `--threads` copies (bulk `INSERT ... SELECT`) of one thread
a real chat graph wrote with a run id per turn, each copy's run ids made its own.
Two identical copies of it: one where `create_retention_indexes()` built its indexes,
the run index among them, one where only the parent and root indexes are built (as
before the run index). Then `ANALYZE`.

Printed: the lookup's plan on each copy (`EXPLAIN (ANALYZE, BUFFERS)`), and the median
time of the lookup (`SELECT_RUN_THREADS_SQL`) for a run in the middle of the key space,
over `--rounds` rounds alternating between the copies; the ratio is without / with.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import _common
import psycopg

from retaining_saver import RetainingSaver
from retaining_saver.backends._postgres_sql import CREATE_PARENT_INDEX_SQL, SELECT_RUN_THREADS_SQL
from retaining_saver.backends._postgres_sql_sweep import CREATE_ROOT_INDEX_SQL
from retaining_saver.testing.graphs import chat_graph, thread, turn

TEMPLATE = "template"
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def build_template(dsn: str, threads: int, turns: int) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        graph = chat_graph(saver)
        for i in range(turns):
            config: Any = thread(TEMPLATE)
            config["configurable"]["run_id"] = f"run-{i}"
            graph.invoke(turn(i), config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            columns = _common.pg_columns(conn, table)
            rest = [c for c in columns if c != "thread_id"]
            chosen = [
                "jsonb_set(metadata, '{run_id}', to_jsonb((metadata ->> 'run_id') || '-' || g))"
                if c == "metadata"
                else c
                for c in rest
            ]
            conn.execute(
                f"INSERT INTO {table} (thread_id, {', '.join(rest)}) "
                f"SELECT 't' || lpad(g::text, 7, '0'), {', '.join(chosen)} FROM {table}, "
                "generate_series(1, %s) AS g WHERE thread_id = %s",
                (threads, TEMPLATE),
            )
            conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (TEMPLATE,))


def plan_and_times(dsns: dict[str, str], run_id: str, rounds: int) -> dict[str, Any]:
    conns = {name: psycopg.connect(dsn, autocommit=True) for name, dsn in dsns.items()}
    try:
        plans = {
            name: [
                str(r[0])
                for r in conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS) " + SELECT_RUN_THREADS_SQL, ([run_id],)
                )
            ]
            for name, conn in conns.items()
        }
        times: dict[str, list[float]] = {name: [] for name in conns}
        order = list(conns)
        for i in range(rounds):
            for name in order if i % 2 else reversed(order):
                start = time.perf_counter()
                found = conns[name].execute(SELECT_RUN_THREADS_SQL, ([run_id],)).fetchall()
                times[name].append(time.perf_counter() - start)
                assert len(found) == 1, found
        return {"plans": plans, "median": {n: statistics.median(t) for n, t in times.items()}}
    finally:
        for conn in conns.values():
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=20_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    server = _common.required_pg_server()
    template = _common.create_database(server)
    copies: dict[str, str] = {}
    try:
        build_template(template, args.threads, args.turns)
        copies = {n: _common.copy_database(server, template) for n in ("without", "with")}
        with psycopg.connect(copies["without"], autocommit=True) as conn:
            for sql in (CREATE_PARENT_INDEX_SQL, CREATE_ROOT_INDEX_SQL):
                conn.execute(sql)
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(copies["with"]) as saver:
            RetainingSaver(saver).create_retention_indexes()
        for dsn in copies.values():
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("ANALYZE")
                rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        run_id = f"run-{args.turns // 2}-{args.threads // 2}"
        found = plan_and_times(copies, run_id, args.rounds)
        print(f"checkpoints: {rows[0] if rows else 0}; looking up {run_id}")
        for name, plan in found["plans"].items():
            print(f"\n{name} the run index:")
            print("\n".join(f"  {line}" for line in plan))
        medians = found["median"]
        _common.print_table(
            "Run lookup (median of rounds)",
            ["copy", "median ms"],
            [(name, f"{seconds * 1000:.3f}") for name, seconds in medians.items()],
        )
        print(f"ratio without / with the run index: {medians['without'] / medians['with']:.1f}x")
    finally:
        for dsn in [*copies.values(), template]:
            _common.drop_database(server, dsn)


if __name__ == "__main__":
    main()
