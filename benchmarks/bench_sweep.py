"""`RetentionSweeper` over a large Postgres store: one pass, its query plan, its memory,
and its strategies against upstream's calls on identical copies.

    python benchmarks/bench_sweep.py [--threads 100000] [--idle-share 0.1] [--turns 2]

A template database holds `--threads` threads copied row for row (bulk
`INSERT ... SELECT`) from two threads a real chat graph wrote: an idle one,
whose checkpoint ids carry a time a month back, and a live one, written now.
Every tenth thread id (by default) is a copy of the idle one, so idle
threads are spread over the whole key space. `create_retention_indexes()`
builds the indexes, then `VACUUM ANALYZE`.

Printed:

- the idle-thread scan's plan (`EXPLAIN (ANALYZE, BUFFERS)` of one page from
  the middle of the key space), whether any node scans `checkpoints`
  sequentially, and the time of a walk over every thread key;
- a full `"delete"` pass (every idle thread, `sweep_limit` above their
  number) on one copy: threads scanned and idle threads deleted per second;
  and upstream's `adelete_thread` in a loop over the same idle ids (it is told
  them: no search) on another copy: the ratio of idle threads per second;
- a full `"keep_latest"` pass on one copy, and upstream's
  `aprune(idle_ids, strategy="keep_latest")` on another: the ratio;
- the median latency of chat turns on live threads while a sweeper runs passes
  back to back in the same event loop (on its own connection), over the same
  without it, on copies of the smaller store (goal: at most 1.1x);
- the peak of Python's traced memory during a pass of `--sweep-limit` idle
  threads, on the full store and on a tenth of it (flat: it does not grow with
  the store).

Each comparison runs on fresh copies (`CREATE DATABASE ... TEMPLATE`), in
the same run, `--rounds` times in an order that flips every round; the ratio
is the median of the rounds' ratios. The absolute rates are context only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import _common
import psycopg

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper
from retaining_saver.backends._postgres_sql_sweep import SCAN_AFTER_SQL
from retaining_saver.testing.graphs import chat_graph, thread, turn

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
IDLE, LIVE = "template-idle", "template-live"
POLICY_AGE = timedelta(days=7)


class _PastClock:
    """Stands in for `langgraph.checkpoint.base.id.time`: ids a month back."""

    def time_ns(self) -> int:
        return int((datetime.now(UTC) - timedelta(days=30)).timestamp() * 1e9)


async def _write_templates(dsn: str, turns: int) -> None:
    from langgraph.checkpoint.base import id as ids
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = chat_graph(saver)
        real, last = ids.time, ids._last_v6_timestamp
        ids.time, ids._last_v6_timestamp = _PastClock(), None  # type: ignore[assignment]
        try:
            for i in range(turns):
                await graph.ainvoke(turn(i), thread(IDLE))
        finally:
            ids.time, ids._last_v6_timestamp = real, last
        for i in range(turns):
            await graph.ainvoke(turn(i), thread(LIVE))
        await RetainingSaver(saver).acreate_retention_indexes()


def thread_id(g: int) -> str:
    return f"t{g:07d}"


def build_template(dsn: str, threads: int, idle_every: int, turns: int) -> float:
    """The template database; the seconds its bulk copy took."""
    asyncio.run(_write_templates(dsn, turns))
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            columns = _common.pg_columns(conn, table)
            rest = ", ".join(c for c in columns if c != "thread_id")
            conn.execute(
                f"INSERT INTO {table} (thread_id, {rest}) "
                f"SELECT 't' || lpad(g::text, 7, '0'), {rest} FROM {table}, "
                "generate_series(1, %s) AS g "
                "WHERE thread_id = CASE WHEN g %% %s = 0 THEN %s ELSE %s END",
                (threads, idle_every, IDLE, LIVE),
            )
            conn.execute(f"DELETE FROM {table} WHERE thread_id IN (%s, %s)", (IDLE, LIVE))
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - start


def scan_plan(dsn: str, threads: int, page: int) -> tuple[list[str], float, float]:
    """The plan of one scan page from the middle; the seconds of a walk over every key;
    the root index's size in MiB."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        params = {"after": thread_id(threads // 2), "limit": page}
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + SCAN_AFTER_SQL, params).fetchall()
        plan = [str(r[0]) for r in rows]
        start, after, seen = time.perf_counter(), "", 0
        while True:
            found = conn.execute(SCAN_AFTER_SQL, {"after": after, "limit": page}).fetchall()
            seen += len(found)
            if len(found) < page:
                break
            after = found[-1][0]
        walk = time.perf_counter() - start
        assert seen == threads, (seen, threads)
        size = conn.execute(
            "SELECT pg_relation_size('retaining_saver_checkpoints_root_idx')"
        ).fetchone()
        return plan, walk, (size[0] if size else 0) / 2**20


async def sweep_once(
    dsn: str, strategy: str, limit: int, *, memory: bool = False
) -> tuple[float, Any]:
    """Seconds of one pass (or, with `memory`, the traced peak in MiB), and the pass."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        saver = RetainingSaver(inner, admission="off")
        policy = IdleThreadPolicy(POLICY_AGE, strategy)  # type: ignore[arg-type]
        sweeper = RetentionSweeper(saver, policy, sweep_limit=limit, page_size=500)
        if memory:
            tracemalloc.start()
        start = time.perf_counter()
        try:
            done = await sweeper.arun_pass()
            if memory:
                return tracemalloc.get_traced_memory()[1] / 2**20, done
            return time.perf_counter() - start, done
        finally:
            if memory:
                tracemalloc.stop()


async def upstream_once(dsn: str, strategy: str, idle: list[str]) -> float:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as inner:
        start = time.perf_counter()
        if strategy == "delete":
            for thread_id_ in idle:
                await inner.adelete_thread(thread_id_)
        else:
            await inner.aprune(idle, strategy="keep_latest")
        return time.perf_counter() - start


async def run_latencies(dsn: str, turns: int, sweeping: bool) -> list[float]:
    """Seconds of each of `turns` chat turns on live threads, while (with `sweeping`) a
    sweeper on its own connection runs passes back to back in the same event loop."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with (
        AsyncPostgresSaver.from_conn_string(dsn) as inner,
        AsyncPostgresSaver.from_conn_string(dsn) as other,
    ):
        graph = chat_graph(RetainingSaver(inner))
        policy = IdleThreadPolicy(POLICY_AGE, "delete")
        sweeper = RetentionSweeper(RetainingSaver(other), policy, sweep_limit=100)

        async def sweep() -> None:
            while True:
                await sweeper.arun_pass()

        task = asyncio.ensure_future(sweep()) if sweeping else None
        seconds = []
        try:
            for i in range(turns):
                start = time.perf_counter()
                await graph.ainvoke(turn(100 + i), thread(thread_id(1 + i % 9)))
                seconds.append(time.perf_counter() - start)
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return seconds


def latency_ratio(server: str, template: str, turns: int) -> tuple[float, float, int]:
    """Median turn latency with a sweeper running over without, each on its own copy,
    in alternating order over two rounds; and how many idle threads the sweeper took."""
    medians: dict[bool, list[float]] = {True: [], False: []}
    for sweeping in (False, True, True, False):
        copy = _common.copy_database(server, template)
        try:
            medians[sweeping].append(
                statistics.median(asyncio.run(run_latencies(copy, turns, sweeping)))
            )
            if sweeping:
                taken = rows_left(copy)["checkpoints"]
        finally:
            _common.drop_database(server, copy)
    with_sweeper = statistics.median(medians[True])
    without = statistics.median(medians[False])
    return with_sweeper / without, without, taken


def rows_left(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        found = {}
        for table in TABLES:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            found[table] = int(row[0]) if row else 0
        return found


def _ours(server: str, template: str, strategy: str, idle: list[str]) -> tuple[float, Any]:
    dsn = _common.copy_database(server, template)
    try:
        seconds, done = asyncio.run(sweep_once(dsn, strategy, len(idle) + 1))
        handled = sum(1 for r in done.results if r.outcome in ("deleted", "pruned"))
        return handled / seconds, (done.scanned / seconds, rows_left(dsn)["checkpoints"])
    finally:
        _common.drop_database(server, dsn)


def _upstream(server: str, template: str, strategy: str, idle: list[str]) -> tuple[float, Any]:
    dsn = _common.copy_database(server, template)
    try:
        seconds = asyncio.run(upstream_once(dsn, strategy, idle))
        return len(idle) / seconds, rows_left(dsn)["checkpoints"]
    finally:
        _common.drop_database(server, dsn)


def compare(server: str, template: str, strategy: str, idle: list[str], rounds: int) -> list[Any]:
    """Per round, one pass and upstream's call, each on its own copy, in an order that
    flips every round; the table row: medians, and the median of the rounds' ratios."""
    ours: list[float] = []
    theirs: list[float] = []
    for index in range(rounds):
        sides = [_ours, _upstream] if index % 2 == 0 else [_upstream, _ours]
        for side in sides:
            rate, extra = side(server, template, strategy, idle)
            if side is _ours:
                ours.append(rate)
                scanned, ours_left = extra
            else:
                theirs.append(rate)
                theirs_left = extra
    ratios = sorted(o / t for o, t in zip(ours, theirs, strict=True))
    return [
        strategy,
        f"{scanned:.0f}",
        f"{statistics.median(ours):.0f}",
        f"{statistics.median(theirs):.0f}",
        f"{statistics.median(ratios):.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}]",
        f"{ours_left} / {theirs_left}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--idle-share", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--sweep-limit", type=int, default=1000)
    parser.add_argument("--latency-turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = _common.required_pg_server()
    every = max(1, round(1 / args.idle_share))
    idle = [thread_id(g) for g in range(1, args.threads + 1) if g % every == 0]
    template = _common.create_database(server)
    small = _common.create_database(server)
    try:
        built = build_template(template, args.threads, every, args.turns)
        build_template(small, args.threads // 10, every, args.turns)
        print(f"built {args.threads} threads ({len(idle)} idle) in {built:.1f} s of bulk copy")
        plan, walk, index_mib = scan_plan(template, args.threads, 500)
        print("\nidle-thread scan, one page of 500 from the middle:")
        print("\n".join(f"  {line}" for line in plan))
        seq = any("Seq Scan on checkpoints" in line for line in plan)
        print(f"sequential scan of checkpoints: {'YES' if seq else 'no'}")
        print(
            f"walk over all {args.threads} thread keys (pages of 500): {walk:.2f} s, "
            f"{args.threads / walk:.0f} threads/s; root index {index_mib:.1f} MiB"
        )
        strategies = ("delete", "keep_latest")
        rows = [compare(server, template, s, idle, args.rounds) for s in strategies]
        _common.print_table(
            f"one full pass over {args.threads} threads, {len(idle)} idle, "
            f"{args.rounds} rounds each",
            [
                "strategy",
                "threads scanned/s",
                "idle threads/s (ours)",
                "idle threads/s (upstream)",
                "ours / upstream (median of rounds) [range]",
                "checkpoints left: ours / upstream",
            ],
            rows,
        )
        ratio, base, left = latency_ratio(server, small, args.latency_turns)
        print(
            f"\nrun latency with a sweeper running / without, {args.latency_turns} chat turns "
            f"on live threads of the {args.threads // 10}-thread store: {ratio:.2f}x "
            f"(goal <= 1.1x; median turn {base * 1000:.1f} ms without; "
            f"{left} checkpoints left after the sweeping run)"
        )
        peaks = []
        for name, dsn in (("full store", template), ("a tenth of it", small)):
            copy = _common.copy_database(server, dsn)
            try:
                peak, _ = asyncio.run(sweep_once(copy, "delete", args.sweep_limit, memory=True))
                peaks.append([name, f"{peak:.1f}"])
            finally:
                _common.drop_database(server, copy)
        _common.print_table(
            f"peak traced memory of a pass of {args.sweep_limit} idle threads",
            ["store", "peak MiB"],
            peaks,
        )
    finally:
        _common.drop_database(server, template)
        _common.drop_database(server, small)


if __name__ == "__main__":
    main()
